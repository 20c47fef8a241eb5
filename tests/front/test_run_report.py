"""`dynstep run` shows graph breaks and recompiles with the user's lines (at the end, or live with
--explain), and --record leaves a recording `dynstep report` reads; through the real CLI."""

from __future__ import annotations

import textwrap

from dynstep.front.cli import main

from .test_runner import dynstep

SCRIPT = textwrap.dedent("""
    import torch

    def f(x, k):
        y = torch.tanh(x) * k
        print("side effect")
        return y + k

    cf = torch.compile(f, backend="aot_eager")
    for k in (1, 2, 3):
        cf(torch.ones(2), k)
    print("done")
""")


def test_graph_breaks_and_recompiles_are_printed_once_with_their_lines_at_the_end(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    result = dynstep("run", str(script))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "side effect\n" * 3 + "done\n"
    err = result.stderr
    assert "dynstep: 2 graph break(s), 2 recompile(s)" in err      # k == 3: Dynamo made k dynamic
    table = err[err.index("dynstep: 2 graph break(s)"):]
    assert table.count("prog.py:6") == 1 and 'print("side effect")' in table   # once, with its count
    assert "prog.py:5" in table and "k == 1" in table                          # the guard that failed


def test_explain_prints_each_as_it_happens(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    result = dynstep("run", "--explain", str(script))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("dynstep: ")]
    assert lines[0] == "dynstep: graph break at prog.py:6 in f: Failed to trace builtin operator"
    assert any(line.startswith("dynstep: recompile at prog.py:5 in f: guard failed: 0/0: k == 1") for line in lines)
    assert "graph break(s)" not in result.stderr                               # no closing table


def test_record_leaves_a_recording_with_the_probes_and_the_compile_log(tmp_path, capsys):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    rec = tmp_path / "run.dynstep"
    result = dynstep("run", "--probe", "op:tanh", "--record", str(rec), str(script))
    assert result.returncode == 0, result.stderr
    assert main(["report", str(rec), "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "3 (3 values, 0 gradients)" in out
    assert "graph break" in out and (tmp_path / "run.report.html").is_file()


def test_record_into_a_foreign_folder_is_refused_before_the_script_runs(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.txt").write_text("x")
    result = dynstep("run", "--record", str(tmp_path / "mine"), str(script))
    assert result.returncode == 2 and result.stdout == ""
    assert "dynstep run: --record:" in result.stderr and "not a dynstep recording" in result.stderr
