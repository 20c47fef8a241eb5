"""`dynstep run --dap`: its options and environment variables, a token made up off loopback, the script's
exit code kept when no client ever attached."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from dynstep.front import cli, cli_options

from .dap import ROOT, env


def options(argv: list[str], monkeypatch, **environ: str):
    for key in ("DYNSTEP_DAP", "DYNSTEP_DAP_WAIT", "DYNSTEP_DAP_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    return cli_options.dap_options(cli.build_parser().parse_args(["run", *argv, "script.py"]))


def test_dap_options_from_flags_and_environment(monkeypatch):
    assert options(["--dap", "5679", "--wait"], monkeypatch) == ({"address": "5679", "token": None, "wait": True}, "")
    assert options([], monkeypatch, DYNSTEP_DAP="6000", DYNSTEP_DAP_WAIT="1") == (
        {"address": "6000", "token": None, "wait": True}, "")
    assert options([], monkeypatch) == (None, "")
    assert "go with --dap" in options(["--wait"], monkeypatch)[1]
    assert "PORT or HOST:PORT" in options(["--dap", "localhost:x"], monkeypatch)[1]
    assert options(["--dap", "0.0.0.0:5679", "--dap-token", "t"], monkeypatch)[0]["token"] == "t"


def test_off_loopback_a_token_is_made_up_and_printed_and_the_exit_code_is_kept(tmp_path):
    script = tmp_path / "seven.py"
    script.write_text("import sys\nprint('ran')\nsys.exit(7)\n")
    proc = subprocess.run([sys.executable, "-m", "dynstep", "run", "--dap", "0.0.0.0:0", str(script)], cwd=str(ROOT),
                          env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 7 and proc.stdout == "ran\n"
    token = re.search(r"attach with token (\S+)", proc.stderr)
    assert token and len(token.group(1)) >= 16
    assert re.search(r"debug adapter listening on 0\.0\.0\.0:\d+", proc.stderr)


@pytest.mark.parametrize("address", ["[::1]:5679", "localhost:5679", "5679"])
def test_addresses(address):
    from dynstep.dap.api import parse_address

    assert parse_address(address)[1] == 5679 and parse_address(address)[0] in ("::1", "localhost", "127.0.0.1")


def test_dynstep_dap_in_the_environment_serves_from_the_first_superstep_compile(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import torch\nf = torch.compile(lambda x: x.relu() + 1, backend='superstep',\n"
                      "                  options={'inner': 'eager'})\nprint(f(torch.ones(2)).tolist())\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=str(ROOT), env={**env(), "DYNSTEP_DAP": "0"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "[2.0, 2.0]\n", proc.stderr
    assert re.search(r"debug adapter listening on 127\.0\.0\.1:\d+", proc.stderr)
