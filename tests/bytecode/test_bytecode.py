"""The bytecode stepper through scripted commands: what a user sees (events) at each stop, on a
function with side effects (a dict update, a list append) and a graph break. Every test runs once
per mechanism this torch offers (conftest.py): torch's debugger callback and stack reader, and
Dynamo's bytecode hook with dynstep's native reader (what torch 2.11 gets)."""

from __future__ import annotations

import inspect
import sys

import pytest
import torch

import dynstep
from dynstep.bytecode.events import BytecodeShown, BytecodeStopped, DecompiledShown, GuardsShown, ValuesShown
from dynstep.core.events import CommandFailed, Evaluated, Info, Stopped
from dynstep import _compat
from dynstep.step.graphs import GRAPHS

pytestmark = pytest.mark.usefixtures("mechanism")    # each test once per mechanism (conftest.py)


def story(x, d, log):
    y = torch.sin(x) * 2
    d["y"] = y.sum()
    log.append("before break")
    print("graph break")
    z = torch.cos(y) + 1
    log.append(z.shape[0])
    return z


BREAK_LINE = inspect.getsourcelines(story)[1] + 4      # the print(...) line


def run_story(events_sink, commands: str | None, backend: str = "eager"):
    cf = torch.compile(story, backend=backend)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    d, log = {}, []
    if commands is None:
        out = cf(x, d, log)
    else:
        with dynstep.step_bytecode(commands=commands):
            out = cf(x, d, log)
    return out, d, log


def bstops(events) -> list[BytecodeStopped]:
    return [e for e in events if isinstance(e, BytecodeStopped)]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_stepping_visits_transformed_code_graph_call_replay_and_resume_in_order(backend, events):
    run_story(events, "; ".join(["s"] * 400), backend=backend)
    trail = []
    for e in events:
        if isinstance(e, BytecodeStopped):
            step = (e.kind, e.row.region if not e.row.side_effect else "side effect")
        elif isinstance(e, Stopped):
            step = ("graph", e.site.node)
        else:
            continue
        if not trail or trail[-1] != step:
            trail.append(step)
    firsts = [s for i, s in enumerate(trail) if s not in trail[:i]]
    assert firsts[0] == ("transformed", "graph call")
    assert ("graph", "sin") in firsts and ("graph", "cos") in firsts
    order = [("transformed", "graph call"), ("graph", "sin"), ("transformed", "side effect"),
             ("transformed", "graph break"), ("resume", "graph call"), ("graph", "cos"), ("resume", "side effect")]
    assert [s for s in firsts if s in order] == order
    assert bstops(events)[0].reason == "entry"
    assert any(e.title == f"resume of story after line {BREAK_LINE}" for e in bstops(events))
    loads = [e.note for e in bstops(events) if "LOAD_GLOBAL __resume_at" in e.row.text]
    assert loads and loads[0].endswith(f"is the resume of story after line {BREAK_LINE}")


def test_stack_shows_the_real_tensors(events):
    run_story(events, "b graph; c; stack; p stack[-1] is x; c")
    stop = bstops(events)[-1]
    assert stop.reason == "break" and stop.graph_call
    shown = [e for e in events if isinstance(e, ValuesShown)][0]
    assert shown.entries[-1][1] == "tensor([1., 2., 3., 4.])"
    assert any("__compiled_fn" in text or "forward" in text for _, text in shown.entries)
    assert [e.text for e in events if isinstance(e, Evaluated)] == ["True"]


def test_step_into_the_graph_lands_on_its_first_node_and_returns_after_the_call(events):
    run_story(events, "b graph; c; " + "; ".join(["s"] * 6) + "; c")
    call = bstops(events)[1]
    nodes = [e for e in events if isinstance(e, Stopped)]
    graph = GRAPHS.get(nodes[0].site.graph)
    order = [row.node for row in graph.rows if row.site is not None]
    assert [n.site.node for n in nodes] == order
    back = [e for e in bstops(events) if e.reason == "return-from-graph"]
    assert len(back) == 1
    assert back[0].row.index == call.row.index + 1 and back[0].title == call.title


def test_continue_inside_the_graph_runs_to_the_end(events):
    out, d, log = run_story(events, "b graph; c; s; c; stack")
    assert [type(e).__name__ for e in events if isinstance(e, (BytecodeStopped, Stopped))] == \
        ["BytecodeStopped", "BytecodeStopped", "Stopped", "BytecodeStopped"]   # the resume's graph call
    assert log == ["before break", 4]


def test_results_are_identical_with_and_without_stepping(events):
    plain = run_story(events, None)
    torch._dynamo.reset()
    stepped = run_story(events, "; ".join(["s"] * 300))
    assert torch.equal(plain[0], stepped[0])
    assert plain[1].keys() == stepped[1].keys() and torch.equal(plain[1]["y"], stepped[1]["y"])
    assert plain[2] == stepped[2] == ["before break", 4]
    assert len(bstops(events)) > 100


def test_next_goes_by_line_and_part_and_steps_over_the_graph(events):
    run_story(events, "n; n; n; n; n; c")
    regions = [(e.row.region, e.line) for e in bstops(events)]
    assert regions[0][0] == "graph call"
    # the replay, then one side effect at a time at the line that wrote it (issue 30: not the def line)
    assert regions[1:4] == [("replay", BREAK_LINE - 4), ("replay", BREAK_LINE - 2), ("replay", BREAK_LINE - 1)]
    assert regions[4] == ("graph break", BREAK_LINE)
    assert not [e for e in events if isinstance(e, Stopped)]


def test_continue_after_next_runs_to_the_end(events):
    # regression: `n` left its frame behind, and that frame's return turned the later `c` into a step
    out, d, log = run_story(events, "b graph; c; c; n; c")
    assert [e.reason for e in bstops(events)] == ["entry", "break", "break", "next"]
    assert log == ["before break", 4]


def test_break_at_a_source_line_and_at_an_instruction(events):
    run_story(events, f"b #3; b {BREAK_LINE}; c; l; c; c")
    stops = bstops(events)
    assert len(stops) == 4
    assert stops[3].reason == "break" and stops[3].kind == "resume"   # its code carries that line too
    assert stops[1].reason == "break" and stops[1].kind == "transformed" and stops[1].row.index == 3
    assert stops[2].reason == "break" and stops[2].line == BREAK_LINE and stops[2].row.region == "graph break"
    listing = [e for e in events if isinstance(e, BytecodeShown)][0]
    assert any(r.breakpoint and r.index == 3 for r in listing.rows)


def test_views_and_backtrace_never_fail(events, monkeypatch):
    monkeypatch.setitem(sys.modules, "depyf", None)      # no depyf: dynstep's own decompiler (issue 30)
    from dynstep.bytecode import views as bytecode_views

    bytecode_views._decompile.cache_clear()
    run_story(events, "ll; b entry; c; ll; bt; locals; globals compiled_fn; c")
    dec, resume = [e for e in events if isinstance(e, DecompiledShown)]
    assert dec.source is not None and dec.reason.startswith("decompiled by dynstep")
    assert "['print']('graph break')" in dec.source
    assert any(line.endswith(f"# line {BREAK_LINE}: print(\"graph break\")") for line in dec.source.splitlines())
    assert "__compiled_fn" in dec.source.splitlines()[dec.mark - 1]          # the entry: the graph call is next
    assert resume.title == f"resume of story after line {BREAK_LINE}" and "return " in resume.source
    bytecode_views._decompile.cache_clear()
    from dynstep.bytecode.events import FramesShown

    frames = [e for e in events if isinstance(e, FramesShown)][0].frames
    assert [f[0] for f in frames] == ["story (transformed by Dynamo)", f"resume of story after line {BREAK_LINE}"]
    values = [e for e in events if isinstance(e, ValuesShown)]
    assert any(name == "log" for name, _ in values[0].entries)
    assert all("__compiled_fn" in name for name, _ in values[1].entries) and values[1].entries


def test_guards_name_the_failed_guard_after_a_recompile(events):
    def g(x):
        return x * 2 + 1

    cg = torch.compile(g, backend="eager", dynamic=False)
    cg(torch.ones(3))
    with dynstep.step_bytecode(commands="guards; c"):
        cg(torch.ones(3, dtype=torch.float64))
    shown = [e for e in events if isinstance(e, GuardsShown)][0]
    assert len(shown.entries) == 2
    current = [s for s in shown.entries if s.current][0]
    other = [s for s in shown.entries if not s.current][0]
    assert any("float64" in p for p in current.code_parts)
    assert any("dtype mismatch" in p for p in other.failed)
    assert any("dtype mismatch" in r for r in shown.recompile_reasons)


def test_code_compiled_before_the_context_is_caught_and_said_to_have_no_step_points(events):
    cf = torch.compile(story, backend="eager")
    cf(torch.ones(2), {}, [])
    with dynstep.step_bytecode(commands="b graph; c; s; c"):
        cf(torch.ones(2), {}, [])
    back = bstops(events)[2]
    assert "no step points" in back.note


def test_quit_raises_abort_and_hooks_are_removed(events, mechanism):
    from torch._dynamo import convert_frame

    hooks_before = dict(convert_frame._bytecode_hooks)
    before = sys.gettrace()
    with pytest.raises(dynstep.Abort, match="program stopped from the debugger"):
        run_story(events, "s; q")
    assert sys.gettrace() is before
    assert dict(convert_frame._bytecode_hooks) == hooks_before        # Dynamo's bytecode hook removed
    if mechanism == "callback":
        assert _compat.set_dynamo_code_callback(None) is None        # torch's debugger callback too


def test_bad_commands_are_clear_errors_and_do_not_stop_the_program(events):
    out, d, log = run_story(events, "frobnicate; b #9999; p undefined_name; c")
    failed = [e.message for e in events if isinstance(e, CommandFailed)]
    assert "unknown command 'frobnicate'" in failed[0]
    assert "no instruction #9999" in failed[1]
    assert "NameError" in failed[2]
    assert log == ["before break", 4]


def test_without_commands_or_terminal_it_says_so_and_does_not_stop(events, monkeypatch):
    monkeypatch.delenv("DYNSTEP_COMMANDS", raising=False)
    monkeypatch.setattr(sys, "stdin", None)
    out, d, log = run_story(events, None)
    with dynstep.step_bytecode():
        story_out = torch.compile(story, backend="eager")(torch.ones(4), {}, [])
    assert not bstops(events)
    assert any(isinstance(e, Info) and "will not stop" in e.message for e in events)
    assert story_out.shape == (4,)


def test_dynstep_run_step_bytecode_with_scripted_commands():
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root, "NO_COLOR": "1", "COLUMNS": "160"}
    env.pop("DYNSTEP_COMMANDS", None)
    proc = subprocess.run([sys.executable, "-m", "dynstep", "run", "--step-bytecode", "--commands",
                           "b graph; c; s; c; c", os.path.join(root, "examples", "bytecode_story.py")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "entered Dynamo code · f (transformed by Dynamo)" in proc.stderr
    assert "step · graph f[0/0] · node sin · torch.sin" in proc.stderr
    assert "breakpoint · resume of f after line" in proc.stderr
    assert "log ['before break', 4]" in proc.stdout


def test_a_superstep_user_backend_keeps_the_shared_script(events):
    # superstep with its own options configures the runtime stepper at compile time; the
    # bytecode stepper's script must still answer the node stops (it used to detach here)
    cf = torch.compile(story, backend=dynstep.superstep(inner="eager", pause=["op:sin"]))
    with dynstep.step_bytecode(commands="b graph; c; s; p value.shape; c; c; c"):
        cf(torch.ones(3), {}, [])
    nodes = [e for e in events if isinstance(e, Stopped)]
    assert nodes and nodes[0].site.node == "sin"
    assert [e.text for e in events if isinstance(e, Evaluated)] == ["torch.Size([3])"]
    assert not any(isinstance(e, Info) and "not stopping" in e.message for e in events)


def test_stack_is_read_by_the_mechanism_in_use_with_null_slots_shown(events, mechanism, monkeypatch):
    from dynstep.bytecode import framestack

    calls = []
    spied = ("frame_value_stack", _compat) if mechanism == "callback" else ("read", framestack)
    real = getattr(spied[1], spied[0])
    monkeypatch.setattr(spied[1], spied[0], lambda frame, depth: calls.append(depth) or real(frame, depth))
    run_story(events, "b graph; c; stack; c; c")
    shown = [e for e in events if isinstance(e, ValuesShown)][0]
    texts = [text for _, text in shown.entries]
    assert calls and len(texts) == 3 and texts.count("'<NULL>'") == 1 and texts[-1] == "tensor([1., 2., 3., 4.])"


def test_native_reader_agrees_with_the_static_depth_and_torch_at_every_instruction(events, mechanism):
    """At every instruction of the transformed function and its resume function, the native reader reads
    exactly the slots the code analysis says are there (3.11: the interpreter's own stack pointer caps
    it), and where torch has its own reader, the very same objects."""
    from dynstep.bytecode import framestack

    torch_reader = _compat.bytecode_hooks_missing() is None
    seen: list[tuple[str, int, int]] = []
    cf = torch.compile(story, backend="eager")
    with dynstep.step_bytecode(commands="c") as engine:
        original = engine.on_instruction

        def spy(frame, code, offset):
            row = engine.infos[code].row_at(offset) if code in engine.infos else None
            if row is not None and row.offset == offset and row.depth is not None:
                native = framestack.read(frame, row.depth)
                assert len(native) == row.depth, (row.text(), native)
                if torch_reader:
                    theirs = _compat.frame_value_stack(frame, row.depth)
                    assert [_same(v) for v in native] == [_same(v) for v in theirs], row.text()
                seen.append((engine.infos[code].kind, row.index, row.depth))
            original(frame, code, offset)

        engine.on_instruction = spy
        cf(torch.tensor([1.0, 2.0]), {}, [])
    assert {kind for kind, _, _ in seen} == {"transformed", "resume"} and max(d for _, _, d in seen) >= 3


def _same(value):
    """Identity, except that both readers' NULL slot reads "<NULL>"."""
    return value if isinstance(value, str) and value == "<NULL>" else id(value)
