"""Per-instruction events for the code objects the bytecode stepper tracks, and nothing else.

    events = tracing.events_for(engine)    # settrace on Python 3.11, sys.monitoring on 3.12+
    events.start(); events.on_code(code); ...; events.stop()

- Python 3.11: `sys.settrace` with `f_trace_opcodes`, set only in frames of tracked code objects
  (the global trace function returns None for every other frame, so they run untraced);
- Python 3.12+: `sys.monitoring` INSTRUCTION and PY_RETURN *local* events on exactly the tracked
  code objects, under a tool id other than DEBUGGER_ID, so debugpy/pdb keep theirs
  (PROFILER_ID, else the first free one).

The engine (`dynstep.bytecode.stepper`) gets ``on_code(code) -> bool`` (track it?),
``on_instruction(frame, code, offset)`` and ``on_return(frame)``. Which code objects reach
`on_code` is `dynstep.bytecode.hooks`' business (torch's callback or Dynamo's bytecode hook).

Only the standard library is imported here, so a test can load this file alone under an
interpreter without torch (tests/bytecode/interp_check.py runs it on 3.12 and 3.13).
"""

from __future__ import annotations

import sys
import types
from typing import Any, Protocol

HAS_MONITORING = hasattr(sys, "monitoring")
TOOL_NAME = "dynstep bytecode stepper"


class Engine(Protocol):
    def on_code(self, code: types.CodeType) -> bool: ...
    def on_instruction(self, frame: types.FrameType, code: types.CodeType, offset: int) -> None: ...
    def on_return(self, frame: types.FrameType) -> None: ...
    def is_tracked(self, code: types.CodeType) -> bool: ...


class Events(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def on_code(self, code: types.CodeType) -> None: ...


def events_for(engine: Engine) -> Events:
    return MonitoringEvents(engine) if HAS_MONITORING else TraceEvents(engine)


class TraceEvents:
    """Python <= 3.11: sys.settrace; opcode events only in frames of tracked code objects."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.previous: Any = None

    def start(self) -> None:
        self.previous = sys.gettrace()
        sys.settrace(self._global)

    def stop(self) -> None:
        sys.settrace(self.previous)

    def on_code(self, code: types.CodeType) -> None:
        self.engine.on_code(code)

    def _global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event != "call" or not self.engine.is_tracked(frame.f_code):
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return self._local

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.engine.on_instruction(frame, frame.f_code, frame.f_lasti)
        elif event == "return":
            self.engine.on_return(frame)
        return self._local


class MonitoringEvents:
    """Python >= 3.12: sys.monitoring local events on each tracked code object."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.tool = -1
        self.codes: list[types.CodeType] = []

    def start(self) -> None:
        mon = sys.monitoring
        free = [t for t in (mon.PROFILER_ID, 3, 4, 5) if mon.get_tool(t) is None]
        if not free:
            raise RuntimeError("dynstep.step_bytecode: every sys.monitoring tool id other than the debugger's "
                               "is taken (a profiler or coverage tool is running); stop one and retry")
        self.tool = free[0]
        mon.use_tool_id(self.tool, TOOL_NAME)
        events = mon.events
        mon.register_callback(self.tool, events.INSTRUCTION, self._instruction)
        mon.register_callback(self.tool, events.PY_RETURN, self._return)

    def stop(self) -> None:
        mon = sys.monitoring
        for code in self.codes:
            mon.set_local_events(self.tool, code, 0)
        mon.register_callback(self.tool, mon.events.INSTRUCTION, None)
        mon.register_callback(self.tool, mon.events.PY_RETURN, None)
        mon.free_tool_id(self.tool)

    def on_code(self, code: types.CodeType) -> None:
        if self.engine.on_code(code) and code not in self.codes:
            self.codes.append(code)
            events = sys.monitoring.events
            sys.monitoring.set_local_events(self.tool, code, events.INSTRUCTION | events.PY_RETURN)

    def _instruction(self, code: types.CodeType, offset: int) -> None:
        frame = _frame_of(code)
        if frame is not None:
            self.engine.on_instruction(frame, code, offset)

    def _return(self, code: types.CodeType, offset: int, retval: object) -> None:
        frame = _frame_of(code)
        if frame is not None:
            self.engine.on_return(frame)


def _frame_of(code: types.CodeType) -> types.FrameType | None:
    """sys.monitoring passes the code, not the frame: the innermost frame running it (the caller
    of the monitoring callback that called this)."""
    f: types.FrameType | None = sys._getframe(2)
    while f is not None and f.f_code is not code:
        f = f.f_back
    return f
