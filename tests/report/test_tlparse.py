"""superstep's artifacts land under the graph's [0/0] entry in tlparse's output (skipped without tlparse)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dynstep.front.cli import main
from dynstep.report.tlparse import find_tlparse, run_tlparse

pytestmark = pytest.mark.skipif(find_tlparse() is None, reason="tlparse is not installed (pip install 'dynstep[report]')")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = textwrap.dedent("""
    import sys, torch, dynstep

    def f(x):
        h = torch.tanh(x) * 2
        return h.relu() + 1

    cf = torch.compile(f, backend="superstep", options={"inner": "aot_eager", "probe": ["op:tanh"],
                       "pause": ["op:tanh"], "commands": "c", "diff": True})
    with dynstep.session(path=sys.argv[1]):
        cf(torch.randn(4)); cf(torch.randn(4))
""")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("traced")
    (tmp / "prog.py").write_text(PROGRAM)
    env = {**os.environ, "TORCH_TRACE": str(tmp / "trace"), "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, str(tmp / "prog.py"), str(tmp / "run.dynstep")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return tmp


def test_compile_and_run_time_artifacts_are_filed_under_the_graphs_compile(traced):
    result = run_tlparse(traced / "trace", traced / "out")
    assert result.ok, result.message
    directory = json.loads((traced / "out" / "compile_directory.json").read_text())
    artifacts = directory["[0/0]"]["artifacts"]
    names = [a["name"].rsplit("_", 1)[0] for a in artifacts]
    for name in ("dynstep_plan", "dynstep_instrumented_graph", "dynstep_source_map", "dynstep_diff"):
        assert names.count(name) == 1, names
    assert names.count("dynstep_pause") == 2                  # one stop per call, at run time
    assert all(a["url"].startswith("-_0_0_0/") for a in artifacts if a["name"].startswith("dynstep_"))
    by_name = {a["name"].rsplit("_", 1)[0]: traced / "out" / a["url"] for a in artifacts}
    plan = json.loads(by_name["dynstep_plan"].read_text())
    assert {(s["node"], s["kind"], s["probe"]) for s in plan["sites"]} == {("tanh", "value", "op:tanh"),
                                                                          ("tanh", "pause", "op:tanh")}
    assert json.loads(by_name["dynstep_source_map"].read_text())["tanh"]["text"] == "h = torch.tanh(x) * 2"
    pause = json.loads(by_name["dynstep_pause"].read_text())
    assert (pause["node"], pause["reason"], pause["source"]) == ("tanh", "pause", "prog.py:5")
    assert json.loads(by_name["dynstep_diff"].read_text())["ok"] is True


def test_dynstep_report_runs_tlparse_and_links_it(traced, capsys):
    page = traced / "page.html"
    assert main(["report", str(traced / "run.dynstep"), "-o", str(page), "--tlparse", str(traced / "trace")]) == 0
    assert '<a href="page.tlparse/index.html">' in page.read_text()
    assert (traced / "page.tlparse" / "index.html").is_file() and "tlparse:" in capsys.readouterr().out


def test_tlparse_never_overwrites_a_folder_it_did_not_write(traced):
    mine = traced / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    result = run_tlparse(traced / "trace", mine)
    assert not result.ok and "is not a tlparse output" in result.message
    assert (mine / "notes.txt").read_text() == "keep"
