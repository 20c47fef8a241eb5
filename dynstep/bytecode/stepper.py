"""The bytecode stepper's engine: where the program is, and when to stop before an instruction.

`BytecodeStepper` gets the hooks' callbacks (`dynstep.bytecode.hooks`), decides whether to stop
(step, next, breakpoints, coming back from a graph), emits `BytecodeStopped` and hands control to
the front end; its commands are in `dynstep.bytecode.commands`.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import types
from typing import Any

from .. import _compat
from ..core.errors import Abort
from ..core.events import Info, emit
from ..step.stepper import STEPPER
from .code import CodeInfo, Here, Row, analyse, resume_title
from .commands import Commands
from .events import BytecodeStopped
from .mechanism import Mechanism
from .navigation import is_return
from .replay import replay_lines
from .views import instruction_row


@dataclasses.dataclass
class _GraphCall:
    frame: types.FrameType
    hits_before: int
    stepping_in: bool


class BytecodeStepper(Commands):
    """State between stops; the commands themselves are in `Commands` (``cmd_<name>``)."""

    def __init__(self, frontend: Any, mechanism: Mechanism) -> None:
        self.frontend = frontend
        self.mechanism = mechanism
        self.infos: dict[types.CodeType, CodeInfo] = {}
        self.failed: dict[types.CodeType, str] = {}
        self.breakpoints: dict[types.CodeType, set[int]] = {}
        self.line_breaks: set[tuple[str, int]] = set()
        self.mode = "step"                       # step | next | continue | into (s at a graph call)
        self.stopped_once = False
        self.step_count = 0
        self.next_from: tuple[types.FrameType, int | None, str] | None = None
        self.graph_call: _GraphCall | None = None
        self.detached = frontend is None
        self.current: Here | None = None
        self.stop_reason, self.stop_note = "", ""
        self.user_vars: dict[str, Any] = {}
        self.list_start: int | None = None
        self.visited: list[types.CodeType] = []   # code objects seen, in first-run order
        self.break_at: set[str] = set()           # "graph": every graph call; "entry": every code's first instruction
        self._running: set[int] = set()           # ids of tracked frames that have started
        self.level = 0                            # the frame `up`/`down` selected (0: where the program stopped)
        self.catch = True                         # stop where an exception is raised in tracked code
        self.return_from: types.FrameType | None = None   # `r`: stop before this frame returns
        self.exception: BaseException | None = None       # the exception at an exception stop
        self.locals_seen: dict[int, dict[str, Any]] = {}  # the frames' locals read at this stop
        self._raised: list[BaseException] = []    # exceptions already stopped at (not again as they propagate)

    # -- hooks (dynstep.bytecode.hooks) --------------------------------------------------------

    def is_tracked(self, code: types.CodeType) -> bool:
        return code in self.infos

    def on_code(self, code: types.CodeType) -> bool:
        if code in self.infos or code in self.failed:
            return code in self.infos
        try:
            info = analyse(code)
            info = info.with_lines(replay_lines(info, _compat.original_code(code)))
        except Exception as exc:   # a code object we cannot read must not stop the program
            self.failed[code] = f"{type(exc).__name__}: {exc}"
            emit(Info(f"dynstep: cannot analyse {code.co_name} ({self.failed[code]}); it runs without stops"))
            return False
        self.infos[code] = info
        self.visited.append(code)
        for file, line in self.line_breaks:
            self.add_line_break(info, file, line)
        return True

    def on_return(self, frame: types.FrameType) -> None:
        self._running.discard(id(frame))
        if (self.next_from is not None and self.next_from[0] is frame) or self.return_from is frame:
            self.next_from = self.return_from = None
            self.mode = "step"     # `n`/`r` ran off the end of the frame: stop at the next instruction anywhere

    def on_exception(self, frame: types.FrameType, exc: BaseException) -> None:
        """An exception raised in, or passing through, a tracked frame: stop there once (`catch off`: never)."""
        info = self.infos.get(frame.f_code)
        if info is None or self.detached or not self.catch or isinstance(exc, (Abort, KeyboardInterrupt)) \
                or any(e is exc for e in self._raised):
            return
        row = info.row_at(frame.f_lasti)
        if row is None:
            return
        self._raised = [*self._raised[-7:], exc]
        self.exception = exc
        try:
            self._stop(Here(frame, info, row), "exception", f"{type(exc).__name__}: {exc}"[:500])
        finally:
            self.exception = None

    def here_of(self, frame: types.FrameType) -> Here:
        """A frame further out, stopped in a call: its code and the instruction running now."""
        info = self.infos[frame.f_code]
        row = info.row_at(frame.f_lasti) or info.rows[0]
        return Here(frame, info, row)

    def on_instruction(self, frame: types.FrameType, code: types.CodeType, offset: int) -> None:
        info = self.infos.get(code)
        if info is None or self.detached:
            return
        row = info.row_at(offset)
        if row is None or row.offset != offset:
            return
        if STEPPER.detached and STEPPER.frontend is self.frontend:
            self.detached = True   # the shared command script ran out inside the graph
            return
        reason, note = self._back_from_graph(frame)
        if reason is None:
            reason = self._reason(frame, info, row)
            note = "about to return: the top of `stack` is the value returned" if reason == "return" else note
        if reason is not None:
            self._stop(Here(frame, info, row), reason, note)
        if self._is_graph_call(info, row):
            self._enter_graph(frame, stepping_in=self.mode == "into")
            if self.mode == "into":
                self.mode = "step"

    # -- decisions ----------------------------------------------------------------------------

    def _reason(self, frame: types.FrameType, info: CodeInfo, row: Row) -> str | None:
        entering = id(frame) not in self._running
        self._running.add(id(frame))
        if row.index in self.breakpoints.get(info.code, ()):
            return "break"
        if ("graph" in self.break_at and self._is_graph_call(info, row)) or ("entry" in self.break_at and entering):
            return "break"
        if self.mode == "step":
            if self.step_count > 0:
                self.step_count -= 1
                return None
            return "entry" if not self.stopped_once else "step"
        if self.mode == "return" and self.return_from is frame and is_return(row):
            return "return"
        if self.mode == "next" and self.next_from is not None and self.next_from[0] is frame:
            _, line, region = self.next_from
            replaying = row.region == "replay" and row.line == info.code.co_firstlineno   # Dynamo's own line
            if (row.line != line and not replaying) or row.region != region:
                return "next"
        return None

    def _is_graph_call(self, info: CodeInfo, row: Row) -> bool:
        return row.offset in info.graph_calls and row.opname != "PRECALL"

    def _enter_graph(self, frame: types.FrameType, *, stepping_in: bool) -> None:
        self.graph_call = _GraphCall(frame, sum(STEPPER.hits.values()), stepping_in)
        if stepping_in:
            STEPPER.resume("step")
        elif STEPPER.mode in ("step", "next"):
            STEPPER.resume("run")   # superstep's step=True asks for a stop at the first node; we decide here

    def _back_from_graph(self, frame: types.FrameType) -> tuple[str | None, str]:
        call = self.graph_call
        if call is None or call.frame is not frame:
            return None, ""
        self.graph_call = None
        ran_steps = sum(STEPPER.hits.values()) > call.hits_before
        if not call.stepping_in:
            return None, ""
        if not ran_steps:
            STEPPER.resume("run")
            return "step", ("the graph ran without stopping: it has no step points (it was compiled before "
                            "step_bytecode() started; torch.compiler.reset() or a recompile inside the context "
                            "gives it some)")
        if STEPPER.mode == "run":          # `c` inside the graph: keep running here too
            self.mode = "continue"
            return None, ""
        STEPPER.resume("run")
        self.mode = "step"
        self.step_count = 0
        return "return-from-graph", "back from the compiled graph"

    def _stop(self, here: Here, reason: str, note: str = "") -> None:
        self.stopped_once = True
        self.current = here
        self.stop_reason, self.stop_note = reason, note   # for front ends that show the stop themselves
        self.list_start = None
        self.mode = "continue"
        self.next_from = self.return_from = None   # `n`/`r` end at any stop: their frame's return must not step later
        self.level, self.locals_seen = 0, {}
        info, row = here.info, here.row
        note = note or _resume_note(here)
        text = linecache.getline(info.code.co_filename, row.line).strip() if row.line else ""
        emit(BytecodeStopped(reason=reason, code=info.code.co_name, title=info.title, kind=info.kind,
                             file=info.code.co_filename, line=row.line, source_text=text,
                             row=instruction_row(row, self.breakpoints.get(info.code, set())),
                             graph_call=self._is_graph_call(info, row), note=note))
        try:
            # the stop runs inside Dynamo-produced code, where Dynamo would compile every function the
            # debugger calls (a tensor's repr, a statement typed at the prompt): not while stopped
            with _compat.dynamo_paused():
                self.frontend.run(self, None)
        finally:
            self.current = None

    # -- what front ends call -----------------------------------------------------------------

    def detach(self, why: str) -> None:
        """The front end cannot answer any more (script ran out, end of input): run to the end."""
        self.detached = True
        self.mode = "continue"
        if STEPPER.frontend is self.frontend:
            STEPPER.detach()
        emit(Info(why))

    def add_line_break(self, info: CodeInfo, file: str, line: int) -> bool:
        if os.path.abspath(info.code.co_filename) != file:
            return False
        row = info.first_of_line(line)
        if row is None:
            return False
        self.breakpoints.setdefault(info.code, set()).add(row.index)
        return True


def _resume_note(here: Here) -> str:
    """At ``LOAD_GLOBAL __resume_at_164_3``: which part of the user's function that resume function is."""
    name = here.row.argrepr.replace("NULL + ", "").replace(" + NULL", "")     # 3.13 pushes the NULL after
    if here.row.opname != "LOAD_GLOBAL" or not name.startswith("__resume_at"):
        return ""
    fn = here.frame.f_globals.get(name)
    return f"{name} is the {resume_title(name, getattr(fn, '__code__', None))}"


