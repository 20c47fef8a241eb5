"""The stepper's front end when a DAP client drives the program, and the sink for its output events.

`DapFrontend` plugs into the stepper through the `Frontend` protocol (`dynstep.core.wiring`):

    decide(stepper, stop)   conditions, hit counts and logpoints of the client's breakpoints; None
                            declines the stop (a logpoint logs and the program runs on)
    run(stepper, stop)      `stopped`, then the client's requests on the program thread until it
                            resumes: continue -> c, next -> s (the next node), stepIn -> n (into the
                            next graph), stepOut -> out (the next graph call): `NODE_STOP` in
                            dynstep/core/command_table.py, the table the REPL and attach read too
    compile_stop(...)       dynstep.breakpoint()'s compile-time stop (reason "compile-time")

With no client attached it declines every stop: the program runs as if no debugger were there,
and a client attaching later finds its graphs ready (stop points everywhere, `STEPPER.stop_points`).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import torch

from .. import _compat
from ..bytecode.stepper import BytecodeStepper
from ..core.command_table import BYTECODE_STOP, NODE_STOP
from ..core.wiring import Frontend
from ..core.errors import Abort
from ..step.compile_stop import CompileStop
from ..step.stepper import STEPPER, Stepper, Stop
from .bytecodeview import BytecodeStopView
from .compileview import CompileStopView
from .stopview import StopView, python_frames
from .texts import event_text

if TYPE_CHECKING:
    from .server import DapServer

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = (os.path.dirname(torch.__file__), _PKG, os.path.join(os.path.dirname(_PKG), "backends"))



class DapFrontend(Frontend):
    def __init__(self, server: "DapServer") -> None:
        self.server = server
        self._pending = threading.local()

    def decide(self, stepper: Stepper, stop: Stop) -> str | None:
        server = self.server
        if server.terminating:
            raise Abort(f"terminated by the debug client (at node {stop.site.node} in graph {stop.site.graph})")
        if not server.attached():
            return None
        server.thread_id()
        stopping, logs = server.breakpoints.hits(stop.site.id, lambda: _namespace(stepper, stop))
        for text in logs:
            server.output(text, source=_source(stop), line=_line(stop))
        reason, description = _dap_reason(stepper, stop, stopping)
        if reason == "exception" and "nan" not in server.exception_filters:
            reason = None
        if reason is None:
            return None
        self._pending.info = (reason, description, [bp.id for bp in stopping])
        return stop.reason if stop.reason != "break" or stopping or _repl_break(stepper, stop) else "step"

    def run(self, stepper: Stepper | BytecodeStepper, stop: Stop | None) -> None:
        if isinstance(stepper, BytecodeStepper):
            return self._bytecode_stop(stepper)
        assert stop is not None
        reason, description, hit_ids = getattr(self._pending, "info", ("pause", "", []))
        self._pending.info = None
        body: dict[str, Any] = {"reason": reason, "threadId": self.server.thread_id(), "allThreadsStopped": False,
                                "description": description}
        if hit_ids:
            body["hitBreakpointIds"] = hit_ids
        if stop.note:
            body["text"] = stop.note
        view = StopView(stepper, stop, self.server.sources, python_frames(_skip_dirs()))
        command, _ = self.server.hold(view, body, _idle(stepper))
        if command == "terminate":
            raise Abort(f"terminated by the debug client at node {stop.site.node} ({stop.site.target}) in graph "
                        f"{stop.site.graph}, {stop.site.source or 'no source line'}")
        stepper.run_command(NODE_STOP.for_request(command))   # the command the request means (core/command_table.py)

    def _bytecode_stop(self, stepper: BytecodeStepper) -> None:
        """A stop before an instruction of Dynamo's bytecode; without a client the program runs on."""
        server = self.server
        here = stepper.current
        if not server.attached() or here is None:
            return
        reason = {"entry": "entry", "break": "breakpoint", "exception": "exception"}.get(stepper.stop_reason, "step")
        body = {"reason": reason, "threadId": server.thread_id(), "allThreadsStopped": False,
                "description": f"{here.row.text()} in {here.info.title}"
                               + (f" ({stepper.stop_note})" if stepper.stop_note else "")}
        view = BytecodeStopView(stepper, server.sources, python_frames(_skip_dirs()))
        command, args = server.hold(view, body)
        if command == "terminate":
            raise Abort(f"terminated by the debug client at {here.row.text()} in {here.info.title}")
        stepper.run_command(BYTECODE_STOP.for_request(command, args))

    def compile_stop(self, stop: CompileStop, fakes: dict[str, Any]) -> None:
        if not self.server.attached():
            return
        body = {"reason": "compile-time", "threadId": self.server.thread_id(), "allThreadsStopped": False,
                "description": f"compile-time stop at {stop.location} (compile {stop.compile_id})"}
        view = CompileStopView(stop, fakes, self.server.sources, python_frames(_skip_dirs()))
        if self.server.hold(view, body, _idle(STEPPER))[0] == "terminate":
            raise Abort(f"terminated by the debug client at the compile-time stop at {stop.location}")

    def __repr__(self) -> str:
        return f"DapFrontend(port={self.server.port})"


class OutputSink:
    """Events as DAP `output` events (probe prints, command answers, warnings), then to the sink before."""

    def __init__(self, server: "DapServer", previous: Any) -> None:
        self.server, self.previous = server, previous

    def __call__(self, event: object) -> None:
        text = event_text(event)
        if text is not None and self.server.attached():
            self.server.output(text)
        self.previous(event)


def _dap_reason(stepper: Stepper, stop: Stop, stopping: list[Any]) -> tuple[str | None, str]:
    site = stop.site
    where = f"{site.node} ({site.target}) in {site.graph}"
    if stop.reason == "interrupt":
        return "pause", f"paused at {where}"
    if stop.reason == "nan":
        return "exception", stop.note or f"NaN/Inf at {where}"
    if stop.reason == "pause":
        return "breakpoint", f"pause selector {site.probe} at {where}"
    if stop.reason == "breakpoint":
        return "breakpoint", f"dynstep.breakpoint() at {site.source}"
    if stop.reason == "break":
        if stopping:
            kind = "function breakpoint" if all(bp.kind == "function" for bp in stopping) else "breakpoint"
            return kind, f"{kind} at {where}"
        if _repl_break(stepper, stop):
            return "breakpoint", f"breakpoint at {where}"
        return ("step", f"step to {where}") if stepper.mode_reason(site.id, site) else (None, "")
    return "step", f"step to {where}"


def _repl_break(stepper: Stepper, stop: Stop) -> bool:
    """A `break SEL` of the stepper's own (the REPL's), not the client's."""
    return any(stop.site.id in ids for ids in stepper.breakpoints.values())


def _namespace(stepper: Stepper, stop: Stop) -> dict[str, Any]:
    return {"torch": torch, **stepper.user_vars, **stop.inputs, **{n: stop.value for n in stop.names()}}


def _source(stop: Stop) -> dict[str, str]:
    file = stop.site.frames[-1].file if stop.site.frames else ""
    return {"name": os.path.basename(file), "path": os.path.abspath(file)} if file else {"name": stop.site.graph}


def _line(stop: Stop) -> int:
    return stop.site.frames[-1].line if stop.site.frames else 0


def _skip_dirs() -> tuple[str, ...]:
    return SKIP_DIRS + (_compat.inductor_cache_dir(),)


def _idle(stepper: Any) -> Any:
    """In a distributed job: what a held rank does while its client is quiet (the coordinator's idle)."""
    coord = getattr(stepper, "coordinator", None)
    return coord.idle if coord is not None else None
