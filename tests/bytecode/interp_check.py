"""Known value stacks read by dynstep's native reader, under the stepper's real instruction events.

Runs under any CPython 3.11+ with the standard library only (no torch, no dynstep install):

    python3.12 tests/bytecode/interp_check.py      # prints one JSON object: {"checks": {...}, ...}

It loads dynstep/bytecode/{framestack,code,tracing}.py by path, builds csrc/frame_stack.c for this
interpreter (into $DYNSTEP_CACHE_DIR), then stops plain functions mid-expression through the events
the stepper uses here (settrace on 3.11, sys.monitoring on 3.12+, with DEBUGGER_ID held by a
stand-in debugger) and compares the stack read at each stop, with the depth dynstep's code
analysis gives, against the stack the function must have there. tests/bytecode/test_framestack.py
runs it in-process for the running Python and in a subprocess for every other Python it finds.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NULL = "<NULL>"


def h(x):
    return x


def call_mid_list(a, b):
    return [a, b, h(b)]          # stopped at CALL h: a, b and the call's NULL, h, argument are on the stack


def outer(a):
    c = "cell-c"

    def inner(b):
        return (a, c, b, h(b))   # free variables before the stack: localsplus holds b, a, c
    return inner


def load_modules() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    """framestack, code and tracing, each loaded alone from its file (they import only the stdlib)."""
    out = []
    for name in ("framestack", "code", "tracing"):
        path = ROOT / "dynstep" / "bytecode" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"_dynstep_check_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module     # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
        out.append(module)
    return tuple(out)


class Recorder:
    """An engine for tracing.events_for: records (opname, stack, stack pointer) at each instruction."""

    def __init__(self, framestack, code_module, codes) -> None:
        self.framestack = framestack
        self.infos = {c: code_module.analyse(c) for c in codes}
        self.stops: list[tuple[str, str, object, object]] = []
        self.returns = 0

    def on_code(self, code):
        return code in self.infos

    def is_tracked(self, code):
        return code in self.infos

    def on_instruction(self, frame, code, offset):
        row = self.infos[code].row_at(offset)
        if row is None or row.offset != offset or row.depth is None:
            return
        module = self.framestack.load()
        self.stops.append((code.co_name, row.opname, self.framestack.read(frame, row.depth),
                           module.stack_pointer(frame)))

    def on_return(self, frame):
        self.returns += 1


def expected(a, b, callee, *, prefix=()) -> list:
    """The stack at CALL callee(b) after `prefix` values: 3.13 pushes NULL after the callable."""
    call = [callee, NULL] if sys.version_info >= (3, 13) else [NULL, callee]
    return [*prefix, *call, b]


def run_checks(framestack, code_module, tracing) -> dict:
    checks: dict[str, tuple[bool, str]] = {}
    if framestack.load() is None:
        return {"built": False, "reason": framestack.status().reason, "checks": {}}
    a, b = object(), ["b"]
    inner = outer(a)
    engine = Recorder(framestack, code_module, [call_mid_list.__code__, inner.__code__])
    debugger = _hold_debugger_id()
    events = tracing.events_for(engine)
    events.start()
    try:
        for code in engine.infos:
            events.on_code(code)
        call_mid_list(a, b)
        inner(b)
    finally:
        events.stop()
        _release(debugger)
    _compare_stops(checks, engine, a, b)
    _check_finished_frame(checks, framestack)
    _check_exception_events(checks, tracing)
    checks["returns seen"] = (engine.returns == 2, f"{engine.returns} returns")
    if tracing.HAS_MONITORING:
        checks["tool id given back"] = (sys.monitoring.get_tool(sys.monitoring.PROFILER_ID) is None, "PROFILER_ID free")
    return {"built": True, "layout": framestack.load().LAYOUT, "checks": checks}


def _compare_stops(checks: dict, engine: Recorder, a, b) -> None:
    def stop(name, opname, nth=0):
        found = [s for s in engine.stops if s[0] == name and s[1] == opname]
        return found[nth] if len(found) > nth else None

    def check(label, got, want):
        same = got is not None and len(got[2]) == len(want) and \
            all(g is w or (w == NULL and g == NULL) for g, w in zip(got[2], want))
        checks[label] = (same, f"got {got and got[2]!r}, want {want!r}")

    check("mid-expression: CALL inside a list display", stop("call_mid_list", "CALL"),
          expected(a, b, h, prefix=(a, b)))
    check("after the call: BUILD_LIST", stop("call_mid_list", "BUILD_LIST"), [a, b, b])
    check("free variables: CALL in a closure", stop("inner", "CALL"), expected(a, b, h, prefix=(a, "cell-c", b)))
    check("after the call: BUILD_TUPLE", stop("inner", "BUILD_TUPLE"), [a, "cell-c", b, b])
    first = engine.stops[0] if engine.stops else None
    checks["first instruction: empty stack"] = (first is not None and first[2] == [], f"{first!r}")
    pointers = {s[3] for s in engine.stops}
    if sys.version_info < (3, 12):   # settrace stores the stack pointer before each opcode event
        good = all(s[3] == len(s[2]) for s in engine.stops)
    else:                            # an INSTRUCTION event leaves it in a C local: the depth is needed
        good = pointers == {None}
    checks["stack pointer as the version keeps it"] = (good, f"pointers seen {sorted(map(str, pointers))}")


def _check_finished_frame(checks: dict, framestack) -> None:
    frame = _a_finished_frame()
    try:
        framestack.read(frame, 3)
        checks["a finished frame is refused"] = (False, "no error")
    except ValueError as exc:
        checks["a finished frame is refused"] = ("finished running" in str(exc), str(exc))
    here = sys._getframe()
    checks["depth past the frame's stack size is clamped"] = (
        len(framestack.read(here, 10_000)) <= here.f_code.co_stacksize, "clamped")


def raising():
    try:
        raise KeyError("inside tracked code")
    except KeyError:
        return 1


def untracked_raising():
    try:
        raise ValueError("elsewhere")
    except ValueError:
        return 2


class ExceptionRecorder:
    """An engine that stops on exceptions (issue 30): only those in tracked code reach it, and none
    while the events are suspended (a compile runs)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_code(self, code):
        return code is raising.__code__

    def is_tracked(self, code):
        return code is raising.__code__

    def on_instruction(self, frame, code, offset):
        pass

    def on_return(self, frame):
        pass

    def on_exception(self, frame, exc):
        self.seen.append(f"{frame.f_code.co_name}:{type(exc).__name__}")


def _check_exception_events(checks: dict, tracing) -> None:
    engine = ExceptionRecorder()
    events = tracing.events_for(engine, on_demand=False)
    events.start()
    try:
        events.on_code(raising.__code__)
        raising()
        untracked_raising()
        events.suspend()
        raising()               # suspended: as while torch compiles
        events.resume()
    finally:
        events.stop()
    ok = engine.seen[:1] == ["raising:KeyError"] and "untracked_raising:ValueError" not in engine.seen
    checks["exceptions in tracked code only, none while suspended"] = (ok and len(engine.seen) == 1, repr(engine.seen))


def _a_finished_frame():
    return sys._getframe()


def _hold_debugger_id():
    """Stand in for debugpy: DEBUGGER_ID taken, so the stepper must use another tool id."""
    mon = getattr(sys, "monitoring", None)
    if mon is None or mon.get_tool(mon.DEBUGGER_ID) is not None:
        return None
    mon.use_tool_id(mon.DEBUGGER_ID, "stand-in debugger")
    return mon.DEBUGGER_ID


def _release(tool) -> None:
    if tool is not None:
        sys.monitoring.free_tool_id(tool)


def main() -> int:
    framestack, code_module, tracing = load_modules()
    report = run_checks(framestack, code_module, tracing)
    report.update(python=".".join(map(str, sys.version_info[:3])), executable=sys.executable,
                  events="sys.monitoring" if tracing.HAS_MONITORING else "settrace",
                  status=framestack.status().reason)
    print(json.dumps(report))
    return 0 if report["built"] and all(ok for ok, _ in report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
