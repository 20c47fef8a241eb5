"""Per-instruction events for the code objects the bytecode stepper tracks, and nothing else.

    events = tracing.events_for(engine, on_demand=True)   # settrace on Python 3.11, sys.monitoring on 3.12+
    events.start(); events.on_code(code); ...; events.stop()
    events.suspend(); ...; events.resume()                 # a compile runs in between: nothing is traced

- Python 3.11: `sys.settrace` with `f_trace_opcodes`, set only in frames of tracked code objects
  (the global trace function returns None for every other frame, so they run untraced). With
  ``on_demand`` (code objects are announced right before they run: torch's bytecode-debugger
  callback) the global function is installed only from that moment until the last tracked frame
  returns, so the rest of the program runs with no trace function at all. Either way it is taken
  away while Dynamo, AOTAutograd or Inductor compile (`suspend`/`resume`, called from torch's
  compile callbacks by `dynstep.bytecode.hooks`): a compile inside `step_bytecode()` makes no
  Python call into dynstep per Python call of the compiler;
- Python 3.12+: `sys.monitoring` INSTRUCTION and PY_RETURN *local* events on exactly the tracked
  code objects, under a tool id other than DEBUGGER_ID, so debugpy/pdb keep theirs
  (PROFILER_ID, else the first free one); RAISE (for exception stops), which sys.monitoring only
  has globally, is off while compiling.

The engine (`dynstep.bytecode.stepper`) gets ``on_code(code) -> bool`` (track it?),
``on_instruction(frame, code, offset)``, ``on_return(frame)`` and, when it has one,
``on_exception(frame, exc)`` (an exception raised in, or passing through, a tracked frame). Which
code objects reach `on_code` is `dynstep.bytecode.hooks`' business (torch's callback or Dynamo's
bytecode hook).

Only the standard library is imported here, so a test can load this file alone under an
interpreter without torch (tests/bytecode/interp_check.py runs it on 3.12 and 3.13).
"""

from __future__ import annotations

import sys
import threading
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
    def suspend(self) -> None: ...
    def resume(self) -> None: ...


def events_for(engine: Engine, *, on_demand: bool = False) -> Events:
    return MonitoringEvents(engine) if HAS_MONITORING else TraceEvents(engine, on_demand=on_demand)


class TraceEvents:
    """Python <= 3.11: sys.settrace; opcode events only in frames of tracked code objects."""

    def __init__(self, engine: Engine, *, on_demand: bool = False) -> None:
        self.engine = engine
        self.on_demand = on_demand
        self.previous: Any = None
        self.armed = False        # our global trace function is (to be) installed
        self.suspended = False    # ... but taken away while a compile runs
        self.live = 0             # tracked frames running now
        self.thread = threading.get_ident()

    def start(self) -> None:
        self.previous = sys.gettrace()
        self.thread = threading.get_ident()
        if not self.on_demand or self.previous is not None:   # another tracer: keep ours installed throughout
            self._arm()

    def stop(self) -> None:
        self.armed = self.suspended = False
        sys.settrace(self.previous)

    def on_code(self, code: types.CodeType) -> None:
        if self.engine.on_code(code) and not self.armed and threading.get_ident() == self.thread:
            self._arm()

    def suspend(self) -> None:
        if self.armed and not self.suspended and threading.get_ident() == self.thread:
            self.suspended = True
            sys.settrace(self.previous)

    def resume(self) -> None:
        if self.suspended and threading.get_ident() == self.thread:
            self.suspended = False
            sys.settrace(self._global)

    def _arm(self) -> None:
        self.armed = True
        if not self.suspended:
            sys.settrace(self._global)

    def _global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event != "call" or not self.engine.is_tracked(frame.f_code):
            return None
        self.live += 1
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return self._local

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.engine.on_instruction(frame, frame.f_code, frame.f_lasti)
        elif event == "exception":
            on_exception = getattr(self.engine, "on_exception", None)
            if on_exception is not None:
                on_exception(frame, arg[1])
        elif event == "return":
            self.engine.on_return(frame)
            self.live = max(0, self.live - 1)
            if self.live == 0 and self.on_demand and self.previous is None and not self.suspended:
                self.armed = False      # the last tracked frame is gone: the program runs untraced again
                sys.settrace(None)
        return self._local


class MonitoringEvents:
    """Python >= 3.12: sys.monitoring local events on each tracked code object (RAISE is global)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.tool = -1
        self.codes: list[types.CodeType] = []
        self.raises = 0      # the RAISE event bit, when the engine stops on exceptions

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
        if getattr(self.engine, "on_exception", None) is not None:
            self.raises = events.RAISE
            mon.register_callback(self.tool, events.RAISE, self._raise)
            mon.set_events(self.tool, self.raises)

    def stop(self) -> None:
        mon = sys.monitoring
        for code in self.codes:
            mon.set_local_events(self.tool, code, 0)
        if self.raises:
            mon.set_events(self.tool, 0)
            mon.register_callback(self.tool, mon.events.RAISE, None)
        mon.register_callback(self.tool, mon.events.INSTRUCTION, None)
        mon.register_callback(self.tool, mon.events.PY_RETURN, None)
        mon.free_tool_id(self.tool)

    def suspend(self) -> None:
        if self.raises:      # local events never fire while compiling (no tracked code runs then)
            sys.monitoring.set_events(self.tool, 0)

    def resume(self) -> None:
        if self.raises:
            sys.monitoring.set_events(self.tool, self.raises)

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

    def _raise(self, code: types.CodeType, offset: int, exc: BaseException) -> None:
        if not self.engine.is_tracked(code):
            return
        frame = _frame_of(code)
        if frame is not None:
            self.engine.on_exception(frame, exc)   # type: ignore[attr-defined]


def _frame_of(code: types.CodeType) -> types.FrameType | None:
    """sys.monitoring passes the code, not the frame: the innermost frame running it (the caller
    of the monitoring callback that called this)."""
    f: types.FrameType | None = sys._getframe(2)
    while f is not None and f.f_code is not code:
        f = f.f_back
    return f
