"""Issue 30 item 2: every stage of what was compiled, in one run — `code [stage]` at a stop (the REPL's
scripted commands, through `dynstep run` in a subprocess and step_bytecode() in process) and
`dynstep run --dump DIR` — each generated line tied to its FX nodes and the user's line."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap

import torch

import dynstep
from dynstep.core.events import CommandFailed, CompileViewShown
from dynstep.stages.stage import StageShown

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROG = textwrap.dedent("""
    import torch

    def f(x, w):
        h = torch.sin(x) @ w
        print("a graph break")
        return (h.relu() * 2).sum()

    torch.manual_seed(0)
    x = torch.randn(4, 4)
    w = torch.randn(4, 4, requires_grad=True)
    out = torch.compile(f)(x, w)
    out.backward()
    print("grad", round(float(w.grad.sum()), 3))
""")
SIN_LINE = 5            # h = torch.sin(x) @ w
RELU_LINE = 7


def dynstep_cli(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache")}
    return subprocess.run([sys.executable, "-m", "dynstep", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)


def test_code_at_a_node_stop_shows_each_stage_with_the_node_marked(tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    run = dynstep_cli("run", "--pause", "op:sin", "--commands", "code; code dynamo; code aot; code inductor; c",
                      str(tmp_path / "prog.py"))
    assert run.returncode == 0, run.stderr
    err = run.stderr
    listed = err.split("compile 0/0: ")[1].split(";")[0].split(", ")
    assert {"dynamo", "joint", "aot", "aot-backward", "inductor", "bytecode"} <= set(listed), listed
    dynamo = err.split("── Dynamo's FX graph · compile 0/0")[1].split("stages of this compile")[0]
    assert [line for line in dynamo.splitlines() if "→" in line][0].split("→")[1].strip().startswith("sin")
    aot = err.split("── AOTAutograd's forward graph · compile 0/0")[1].split("stages of this compile")[0]
    assert any("→" in line and "aten.sin.default" in line for line in aot.splitlines())
    inductor = err.split("── Inductor's output code (forward) · compile 0/0")[1].split("stages of this compile")[0]
    (launch,) = [line for line in inductor.splitlines() if "→" in line]
    assert "cpp_fused_sin" in launch and f"# sin · prog.py:{SIN_LINE}  h = torch.sin(x) @ w" in launch


def test_dump_writes_every_stage_of_every_compile_tied_to_nodes_and_lines(tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    out = tmp_path / "stages"
    run = dynstep_cli("run", "--dump", str(out), str(tmp_path / "prog.py"))
    assert run.returncode == 0, run.stderr
    assert "stage file(s) of the run in" in run.stderr and "grad " in run.stdout
    index = json.loads((out / "index.json").read_text())
    assert index["format"] == "dynstep dump"
    by_stage = {(e["compile_id"], e["stage"]): e for e in index["files"]}
    for cid in ("0/0", "1/0"):     # f up to the graph break, and its resume function
        for stage in ("dynamo", "joint", "aot", "aot-backward", "post-grad", "post-grad-backward", "inductor",
                      "inductor-backward", "bytecode"):
            assert (cid, stage) in by_stage, (cid, stage, sorted(by_stage))
    forward = by_stage[("0/0", "inductor")]
    text = (out / forward["file"]).read_text().splitlines()
    sin = [int(n) for n, m in forward["lines"].items() if "sin" in m["nodes"]]
    assert sin and forward["lines"][str(sin[0])]["source"].endswith(f"prog.py:{SIN_LINE}")
    assert text[sin[0] - 1].endswith(f"# dynstep: sin · prog.py:{SIN_LINE}  h = torch.sin(x) @ w")
    assert forward["runs_as"] and os.path.basename(forward["runs_as"]).endswith(".py")
    backward = (out / by_stage[("1/0", "inductor-backward")]["file"]).read_text()
    assert f"prog.py:{RELU_LINE}  return (h.relu() * 2).sum()" in backward     # backward kernels: the user's line
    bytecode = (out / by_stage[("0/0", "bytecode")]["file"]).read_text()
    ast.parse(bytecode)
    assert "__compiled_fn" in bytecode and f"# line {SIN_LINE + 1}: print(\"a graph break\")" in bytecode
    again = dynstep_cli("run", "--dump", str(out), str(tmp_path / "prog.py"))   # an earlier dump is replaced
    assert again.returncode == 0, again.stderr


def test_dump_never_writes_into_a_folder_it_does_not_own(tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    run = dynstep_cli("run", "--dump", str(tmp_path / "mine"), str(tmp_path / "prog.py"))
    assert run.returncode == 2 and "holds files dynstep did not write" in run.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep" and "grad" not in run.stdout


def story(x):
    y = torch.sin(x) * 2
    print("graph break")
    return torch.cos(y) + 1


def test_code_at_a_bytecode_stop_marks_the_statement_and_reaches_the_graphs(events):
    cf = torch.compile(story, backend="aot_eager")
    with dynstep.step_bytecode(commands="code bytecode; code dynamo; code aot; code inductor; c"):
        cf(torch.ones(3))
    bytecode, dynamo, aot = [e for e in events if isinstance(e, StageShown)]
    (marked,) = bytecode.marked
    assert "__compiled_fn" in dict(bytecode.lines)[marked]       # the entry: the graph call comes next
    assert any("torch.sin" in text for _, text in dynamo.lines) and aot.name == "aot"
    (missing,) = [e for e in events if isinstance(e, CommandFailed)]
    assert "has no inductor stage" in missing.message and "aot" in missing.message


def test_code_at_the_compile_time_stop_is_the_graph_so_far(events):
    def f(x):
        h = x.relu()
        dynstep.breakpoint(run=False)
        return h * 2

    dynstep.configure(commands="code; code inductor; c")
    torch.compile(f, backend="eager")(torch.ones(2))
    graphs = [e.view for e in events if isinstance(e, CompileViewShown) and e.view.kind == "graph"]
    assert graphs and any("relu" in line for line in graphs[0].lines)
    (failed,) = [e for e in events if isinstance(e, CommandFailed)]
    assert "still being traced" in failed.message
