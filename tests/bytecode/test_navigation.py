"""Issue 30 item 3: what torch's bytecode debugger had and dynstep's lacked — frame navigation (up/down),
`r` (run to the return), stops on exceptions and Python statements at the prompt — through scripted
commands on a real torch.compile, once per mechanism (conftest.py)."""

from __future__ import annotations

import inspect

import pytest
import torch

import dynstep
from dynstep.bytecode.events import BytecodeStopped, FrameSelected, FramesShown, ValuesShown
from dynstep.core.events import CommandFailed, Evaluated

pytestmark = pytest.mark.usefixtures("mechanism")    # each test once per mechanism (conftest.py)


def story(x, d, log):
    y = torch.sin(x) * 2
    d["y"] = y.sum()
    log.append("before break")
    print("graph break")
    z = torch.cos(y) + 1
    log.append(z.shape[0])
    return z


def run(commands: str, fn=story, *args):
    cf = torch.compile(fn, backend="eager")
    args = args or (torch.tensor([1.0, 2.0, 3.0, 4.0]), {}, [])
    with dynstep.step_bytecode(commands=commands):
        return cf(*args)


def stops(events):
    return [e for e in events if isinstance(e, BytecodeStopped)]


def evaluated(events):
    return {e.expr: e.text for e in events if isinstance(e, Evaluated)}


def test_up_and_down_move_between_the_resume_function_and_the_frame_that_called_it(events):
    run("b entry; c; bt; u; p x.tolist(); locals; bt; d; p y.tolist(); u 5; c")
    resume = stops(events)[-1]
    assert resume.title.startswith("resume of story after line") and resume.reason == "break"
    up, down = [e for e in events if isinstance(e, FrameSelected)]
    assert (up.level, up.title, down.level) == (1, "story (transformed by Dynamo)", 0)
    assert up.row.text.startswith("CALL")        # the outer frame waits in its call of the resume function
    shown = evaluated(events)
    assert shown["x.tolist()"] == "[1.0, 2.0, 3.0, 4.0]"
    assert shown["y.tolist()"].startswith("[1.68")   # the resume function's own local
    (outer_locals,) = [e for e in events if isinstance(e, ValuesShown) and e.title == "locals"]
    assert {"x", "d", "log"} <= {name for name, _ in outer_locals.entries}
    first_bt, second_bt = [e for e in events if isinstance(e, FramesShown)]
    assert (first_bt.current, second_bt.current) == (1, 0)    # bt marks the selected frame
    (too_far,) = [e for e in events if isinstance(e, CommandFailed)]
    assert "no frame above" in too_far.message


def test_return_runs_to_the_end_of_the_selected_frame(events):
    out = run("r; stack; c")
    stop = stops(events)[-1]
    assert stop.reason == "return" and stop.title == "story (transformed by Dynamo)"
    assert stop.row.text == "RETURN_VALUE"
    (stack,) = [e for e in events if isinstance(e, ValuesShown)]
    assert stack.entries[-1][1] == repr(out)


def test_statements_at_the_prompt_change_the_frames_variables(events):
    """`y = y * 0` in the resume function before its graph runs: cos(0) + 1 everywhere."""
    out = run("b entry; c; y = y * 0; y.sum(); import math; p math.pi > 3; !log.append('typed'); c")
    assert torch.equal(out, torch.full((4,), 2.0))
    assert evaluated(events)["y.sum()"] == "tensor(0.)" and evaluated(events)["math.pi > 3"] == "True"
    assert not [e for e in events if isinstance(e, CommandFailed)]


def test_a_statement_in_the_transformed_function_reaches_the_graph_call(events):
    out = run("x = x * 0; c")
    assert torch.equal(out, torch.full((4,), 2.0))      # sin(0) * 2 = 0, cos(0) + 1 = 2


def raises_at_the_break(path):
    t = torch.ones(2) * 3
    handle = open(path)              # not traceable: a graph break; it raises here
    return t, handle


def test_an_exception_in_dynamo_code_stops_where_it_is_raised(events, tmp_path):
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError):
        run("c; p type(exc).__name__; p path == exc.filename; c", raises_at_the_break, missing)
    (stop,) = stops(events)[-1:]
    line = inspect.getsourcelines(raises_at_the_break)[1] + 2
    assert (stop.reason, stop.line, stop.row.region) == ("exception", line, "graph break")
    assert stop.note.startswith("FileNotFoundError: [Errno 2]")
    assert evaluated(events) == {"type(exc).__name__": "'FileNotFoundError'", "path == exc.filename": "True"}


def test_catch_off_lets_exceptions_pass(events, tmp_path):
    with pytest.raises(FileNotFoundError):
        run("catch off; c", raises_at_the_break, str(tmp_path / "nope.txt"))
    assert [e.reason for e in stops(events)] == ["entry"]


def test_a_frame_waiting_in_call_function_ex_shows_only_the_slots_still_live(events):
    """At a frame further out, CPython saved no stack pointer, so the stack is read by the static depth.
    CALL_FUNCTION_EX pops its argument sequence before calling and may free it (a list made into a
    tuple): `stack` there leaves that slot out instead of reading freed memory (what corrupted the heap
    and killed a test worker on CPython 3.11, 2026-11-26)."""
    run("b entry; c; u; !keep = [[0] for _ in range(200)]; stack; c")    # lists that may reuse its memory
    up = [e for e in events if isinstance(e, FrameSelected)][0]
    (shown,) = [e for e in events if isinstance(e, ValuesShown) and e.title.startswith("value stack")]
    if not up.row.text.startswith("CALL_FUNCTION_EX"):
        pytest.skip(f"Dynamo calls the resume function with {up.row.text} on this Python")   # not on 3.11-3.13
    # the top is the callable: the argument sequence the instruction popped (and may have freed) is not read
    assert shown.entries and "torch_dynamo_resume_in_story" in shown.entries[-1][1], shown.entries


@pytest.mark.parametrize("source, dropped", [("f(*a)", 1), ("f(*a, **k)", 2), ("f(a)", 0)])
def test_live_depth_in_a_call_leaves_out_what_call_function_ex_popped(source, dropped):
    import dis

    from dynstep.bytecode.code import live_depth_in_call

    code = compile(source, "<test>", "eval")
    calls = [i for i in dis.get_instructions(code) if i.opname.startswith("CALL")]
    assert calls, list(dis.get_instructions(code))
    assert live_depth_in_call(code, calls[-1].offset, 5) == 5 - dropped
