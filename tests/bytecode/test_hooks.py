"""The hooks of the bytecode stepper: on 3.11 the real settrace path; the 3.12+ sys.monitoring path
against a recording stand-in for sys.monitoring (this image has Python 3.11), checking it never
takes DEBUGGER_ID, enables events only on tracked code, and gives everything back."""

from __future__ import annotations

import sys
import types

import pytest

from dynstep import _compat
from dynstep.bytecode import hooks as bytecode_hooks


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


@pytest.mark.parametrize("taken", [(), (2,)])
def test_monitoring_path_uses_a_tool_id_other_than_the_debuggers(monkeypatch, taken):
    fake = FakeMonitoring(taken=(0, *taken))       # a debugger holds DEBUGGER_ID
    monkeypatch.setattr(sys, "monitoring", fake, raising=False)
    monkeypatch.setattr(bytecode_hooks, "HAS_MONITORING", True)
    engine = Engine()
    seen = []
    monkeypatch.setattr(_compat, "set_dynamo_code_callback", lambda fn: seen.append(fn))
    with bytecode_hooks.installed(engine):
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
    assert seen[-1] is None                      # the previous Dynamo callback (none) is back


def test_monitoring_path_says_what_to_do_when_no_tool_id_is_free(monkeypatch):
    monkeypatch.setattr(sys, "monitoring", FakeMonitoring(taken=(0, 2, 3, 4, 5)), raising=False)
    monkeypatch.setattr(bytecode_hooks, "HAS_MONITORING", True)
    with pytest.raises(RuntimeError, match="tool id other than the debugger's is taken"):
        with bytecode_hooks.installed(Engine()):
            pass


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the settrace path is the Python <= 3.11 one")
def test_settrace_path_traces_only_tracked_code_and_restores_the_trace_function():
    engine = Engine()
    before = sys.gettrace()
    with bytecode_hooks.installed(engine):
        tracked()
        other()
    assert sys.gettrace() is before
    assert engine.instructions and {name for name, _ in engine.instructions} == {"tracked"}
    assert engine.returns == ["tracked"]
