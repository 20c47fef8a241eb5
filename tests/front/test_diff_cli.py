"""`dynstep diff SCRIPT` through a real subprocess: exit status, JSON, HTML and the repro."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent('''
    import torch
    import torch.nn.functional as F

    def block(x, w):
        h = x @ w
        g = F.gelu(h)  # THE_LINE
        return g.sum(dim=-1)

    torch.manual_seed(0)
    fn = torch.compile(block)
    print("result", fn(torch.randn(4, 8), torch.randn(8, 8)).shape)
''')

BACKEND = textwrap.dedent('''
    import sys, torch
    sys.path.insert(0, {tests!r})
    import planted
    BACKEND = planted.swap_op("torch.nn.functional.gelu", "", torch.relu)
''')


def _run(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]),
               TORCHINDUCTOR_CACHE_DIR="/tmp/dynstep-inductor-cache", COLUMNS="120")
    return subprocess.run([sys.executable, "-m", "dynstep", "diff", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def _files(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "bad.py").write_text(BACKEND.format(tests=os.path.join(ROOT, "tests", "eagerdiff")))


def test_cli_reports_the_divergent_line_and_exits_nonzero(tmp_path):
    _files(tmp_path)
    run = _run(tmp_path, "train.py", "--backend", "bad:BACKEND", "--no-ladder", "--json", "d.json",
               "--html", "d.html", "--repro", "rep")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "result torch.Size([4])" in run.stdout  # the script ran to its end
    data = json.loads((tmp_path / "d.json").read_text())
    first = data["first_divergence"]
    assert first["source"] == "train.py:7" and first["source_text"] == "g = F.gelu(h)  # THE_LINE"
    assert "train.py:7" in run.stdout and "DIVERGES" in run.stdout
    assert "g = F.gelu(h)" in (tmp_path / "d.html").read_text()
    repro = subprocess.run([sys.executable, "rep/repro.py"], cwd=tmp_path, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(tmp_path)), timeout=120)
    assert repro.returncode == 1 and "fresh compile" in repro.stdout, repro.stdout + repro.stderr


def test_cli_clean_backend_exits_zero_and_restores_torch_compile(tmp_path):
    _files(tmp_path)
    run = _run(tmp_path, "train.py", "--backend", "aot_eager")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no divergence" in run.stdout


def test_cli_names_a_bad_backend_argument(tmp_path):
    _files(tmp_path)
    run = _run(tmp_path, "train.py", "--backend", "nosuchmodule:X")
    assert run.returncode != 0 and "cannot import" in run.stderr


def test_diff_of_a_script_ending_in_sys_exit_still_reports_and_exits_1(tmp_path):
    """Issue 14 item 7: `sys.exit(main())` used to end the diff before its report (exit 0)."""
    _files(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT.replace('print("result"', 'def main():\n    print("result"')
                                       + "    return 0\n\nimport sys\nsys.exit(main())\n")
    run = _run(tmp_path, "train.py", "--backend", "bad:BACKEND", "--no-ladder")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "DIVERGES" in run.stdout and "train.py:7" in run.stdout


def test_summary_line_is_printed_once(tmp_path):
    """Issue 29: the summary line came twice (the report's own, then again as the verb's message)."""
    _files(tmp_path)
    run = _run(tmp_path, "train.py", "--backend", "bad:BACKEND", "--no-ladder")
    assert run.returncode == 1, run.stdout + run.stderr
    both = run.stdout + run.stderr
    assert both.count("dynstep diff: first divergence") == 1, both


OWN_OPTIONS = textwrap.dedent('''
    import torch

    def clean(x):
        return torch.tanh(x) * 2

    def buggy(x):
        return torch.relu(x) - 1  # RELU_LINE

    x = torch.randn(64, 32)
    a = torch.compile(clean, backend="aot_eager")(x)
    # Inductor's own test switch, given as this script's options=: its relu computes x + 1
    b = torch.compile(buggy, options={"cpp.inject_relu_bug_TESTING_ONLY": "accuracy"})(x)
    print("clean matches eager:", bool(torch.allclose(a, clean(x))))
    print("buggy min:", float(b.min()))
''')


def test_the_script_gets_compiled_values_and_its_own_backend_and_options(tmp_path):
    """Issue 29: under `dynstep diff` the script's compiled calls returned eager values (it saw no
    symptom) and its backend=/mode=/options= were dropped: the relu bug given as options= went unseen."""
    (tmp_path / "own.py").write_text(OWN_OPTIONS)
    run = _run(tmp_path, "own.py", "--no-ladder", "--no-root-cause", "--json", "d.json")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "clean matches eager: True" in run.stdout
    assert float(run.stdout.split("buggy min: ")[1].split()[0]) < -1.0   # x + 1 - 1: eagerly relu(x) - 1 >= -1
    data = json.loads((tmp_path / "d.json").read_text())
    assert [g["backend"] for g in data["graphs"]] == ["aot_eager", "inductor"]
    assert data["first_divergence"]["source"] == "own.py:8"


def test_find_the_bug_example_under_dynstep_diff_reports_instead_of_crashing(tmp_path):
    """Issue 29: `dynstep diff examples/find_the_bug.py` (what the README points to) ended with an
    IndexError and wrote no report: the script's own dynstep.diff() got the outer diff's backend."""
    example = os.path.join(ROOT, "examples", "find_the_bug.py")
    run = _run(tmp_path, example, "--no-ladder", "--json", "d.json")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and "IndexError" not in run.stderr
    assert "the symptom: max |compiled - eager| = 0\n" not in run.stdout   # the script sees the compiled values
    assert "3. the culprit: find_the_bug.py:34" in run.stdout     # its own diff ran (with its own backend)
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["first_divergence"]["source"] == "find_the_bug.py:34"
    assert data["root_cause"]["subsystem"] == "lowerings" and data["root_cause"]["detail"] == "aten.relu"
