"""The hooks of the bytecode stepper: on 3.11 the real settrace path; the 3.12+ sys.monitoring path
against a recording stand-in for sys.monitoring under this interpreter, checking it never takes
DEBUGGER_ID, enables events only on tracked code, and gives everything back, with either source of
Dynamo's code objects. The real sys.monitoring runs on Python 3.12 and 3.13 interpreters are in
test_framestack.py (tests/bytecode/interp_check.py, a subprocess per interpreter)."""

from __future__ import annotations

import sys
import types

import pytest

from dynstep import _compat
from dynstep.bytecode import hooks as bytecode_hooks
from dynstep.bytecode import tracing
from dynstep.bytecode.mechanism import Mechanism, events_source


class FakeMonitoring:
    DEBUGGER_ID, COVERAGE_ID, PROFILER_ID, OPTIMIZER_ID = 0, 1, 2, 5
    events = types.SimpleNamespace(INSTRUCTION=1 << 3, PY_RETURN=1 << 4)

    def __init__(self, taken=()):
        self.tools = {t: "other" for t in taken}
        self.callbacks: dict[tuple[int, int], object] = {}
        self.local: dict[tuple[int, types.CodeType], int] = {}
        self.freed: list[int] = []

    def get_tool(self, tool):
        return self.tools.get(tool)

    def use_tool_id(self, tool, name):
        assert tool not in self.tools
        self.tools[tool] = name

    def free_tool_id(self, tool):
        self.tools.pop(tool)
        self.freed.append(tool)

    def register_callback(self, tool, event, fn):
        self.callbacks[(tool, event)] = fn

    def set_local_events(self, tool, code, mask):
        self.local[(tool, code)] = mask


class Engine:
    def __init__(self):
        self.codes, self.instructions, self.returns = [], [], []

    def on_code(self, code):
        self.codes.append(code)
        return code.co_name == "tracked"

    def is_tracked(self, code):
        return code.co_name == "tracked"

    def on_instruction(self, frame, code, offset):
        self.instructions.append((frame.f_code.co_name, offset))

    def on_return(self, frame):
        self.returns.append(frame.f_code.co_name)


def tracked():
    return 1


def other():
    return 2


class Handle:
    def __init__(self, seen):
        self.seen = seen

    def remove(self):
        self.seen.append(None)


def _fake_code_source(monkeypatch, kind: str) -> list:
    """Both sources record what they are handed; None once removed (or the previous callback restored)."""
    seen: list = []
    if kind == "callback":
        monkeypatch.setattr(_compat, "set_dynamo_code_callback", lambda fn: seen.append(fn))
    else:
        monkeypatch.setattr(_compat, "register_dynamo_bytecode_hook", lambda fn: seen.append(fn) or Handle(seen))
        monkeypatch.setattr(_compat, "dynamo_output_codes", lambda: [])
    return seen


@pytest.mark.parametrize("kind", ["callback", "hook"])
@pytest.mark.parametrize("taken", [(), (2,)])
def test_monitoring_path_uses_a_tool_id_other_than_the_debuggers(monkeypatch, taken, kind):
    fake = FakeMonitoring(taken=(0, *taken))       # a debugger holds DEBUGGER_ID
    monkeypatch.setattr(sys, "monitoring", fake, raising=False)
    monkeypatch.setattr(tracing, "HAS_MONITORING", True)
    engine = Engine()
    seen = _fake_code_source(monkeypatch, kind)
    with bytecode_hooks.installed(engine, Mechanism(kind, "native", "sys.monitoring", forced=True)):
        tool = next(t for t, name in fake.tools.items() if name == "dynstep bytecode stepper")
        assert tool not in (0, *taken)
        on_code = seen[0]
        on_code(tracked.__code__)
        on_code(other.__code__)
        assert fake.local == {(tool, tracked.__code__): fake.events.INSTRUCTION | fake.events.PY_RETURN}
        fake.callbacks[(tool, fake.events.INSTRUCTION)](sys._getframe().f_code, 4)
        assert engine.instructions == [(sys._getframe().f_code.co_name, 4)]
    assert fake.local[(tool, tracked.__code__)] == 0
    assert fake.freed == [tool] and fake.tools == {t: "other" for t in (0, *taken)}
    assert seen[-1] is None                      # the previous Dynamo callback (none) is back / the hook removed


def test_monitoring_path_says_what_to_do_when_no_tool_id_is_free(monkeypatch):
    monkeypatch.setattr(sys, "monitoring", FakeMonitoring(taken=(0, 2, 3, 4, 5)), raising=False)
    monkeypatch.setattr(tracing, "HAS_MONITORING", True)
    seen = _fake_code_source(monkeypatch, "hook")
    with pytest.raises(RuntimeError, match="tool id other than the debugger's is taken"):
        with bytecode_hooks.installed(Engine(), Mechanism("hook", "native", "sys.monitoring", forced=True)):
            pass
    assert seen == []                            # nothing was installed


def test_this_pythons_real_event_path_traces_only_tracked_code_and_gives_everything_back(monkeypatch):
    """settrace on 3.11, the real sys.monitoring on 3.12+ (no stand-in)."""
    engine = Engine()
    before = sys.gettrace()
    seen = _fake_code_source(monkeypatch, "hook")
    with bytecode_hooks.installed(engine, Mechanism("hook", "native", events_source(), forced=True)):
        seen[0](tracked.__code__)                # what Dynamo's bytecode hook would hand over
        seen[0](other.__code__)
        tracked()
        other()
    assert sys.gettrace() is before
    assert engine.instructions and {name for name, _ in engine.instructions} == {"tracked"}
    assert engine.returns == ["tracked"]
    if tracing.HAS_MONITORING:
        mon = sys.monitoring
        assert mon.get_tool(mon.PROFILER_ID) is None           # the tool id is given back
        assert mon.get_local_events(mon.PROFILER_ID, tracked.__code__) == 0


def test_a_compile_inside_step_bytecode_runs_untraced(monkeypatch, mechanism):
    """Issue 30 item 4: the 3.11 trace function saw every Python call of Dynamo and Inductor (6.4
    million calls for a small Inductor compile, about 2x its time). Now nothing of dynstep runs per
    call while torch compiles: no trace function on 3.11, no global sys.monitoring event on 3.12+."""
    import torch

    import dynstep
    from torch._dynamo.callback import callback_handler

    seen = {"compiling": False, "traced while compiling": 0, "compiles": 0, "tracer while compiling": set()}
    original = tracing.TraceEvents._global

    def counting(self, frame, event, arg):
        seen["traced while compiling"] += seen["compiling"]
        return original(self, frame, event, arg)

    def end(args):       # registered before dynstep's: runs before the stepper resumes its events
        seen["compiling"] = False

    def start(args):     # registered after dynstep's: runs once the stepper has suspended its events
        seen["compiling"] = True
        seen["compiles"] += 1
        tool = getattr(sys, "monitoring", None)
        active = sys.gettrace() if not tracing.HAS_MONITORING else \
            [t for t in range(6) if tool.get_tool(t) == tracing.TOOL_NAME and tool.get_events(t)]
        seen["tracer while compiling"].add(repr(active))

    monkeypatch.setattr(tracing.TraceEvents, "_global", counting)

    def f(x):
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()      # a resume function, compiled while f's frame is traced
        return torch.cos(y).sum()

    callback_handler.register_end_callback(end)
    try:
        with dynstep.step_bytecode(commands="c") as engine:
            callback_handler.register_start_callback(start)
            try:
                out = torch.compile(f, backend="inductor")(torch.ones(4))
            finally:
                callback_handler.remove_start_callback(start)
    finally:
        callback_handler.remove_end_callback(end)
    assert float(out) == pytest.approx(float(torch.cos(torch.sin(torch.ones(4)) * 2).sum()))
    assert seen["compiles"] >= 2 and len(engine.visited) >= 2        # f and its resume function, stepped
    assert seen["traced while compiling"] == 0
    assert seen["tracer while compiling"] == {"None" if not tracing.HAS_MONITORING else "[]"}
