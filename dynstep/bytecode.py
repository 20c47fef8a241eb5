"""The bytecode stepper: step through the code Dynamo wrote, and from it into the compiled graph.

    with dynstep.step_bytecode():                       # REPL on a terminal
        cfn(x, d, log)
    with dynstep.step_bytecode(commands="s; stack; n; c"):   # scripted (or DYNSTEP_COMMANDS)
        cfn(x, d, log)

It stops at the first instruction of the first Dynamo-produced code object that runs (the
transformed function, a resume function after a graph break, and code compiled before the
context was entered when it runs again). `s` runs one instruction; at the instruction that
calls the compiled graph (``__compiled_fn_*``) `s` goes on at node level in the runtime stepper
(`dynstep.stepper.STEPPER`, the same front end and command script), and stepping past the last
node comes back to the instruction after the call. `n` runs to the next instruction of this
frame that starts another source line or another part of Dynamo's output (graph call, side-effect
replay, graph break, resume call), without stopping in calls. Commands: `dynstep.bytecode_commands`.

To step into graphs they must have step points: while the context is open every graph Dynamo
compiles goes through superstep (``step=True``) with the user's own backend as the inner
compiler (`_compat.wrap_dynamo_compiler`). Graphs compiled before keep running as they were;
`s` at their call says so and steps over them. The engine never prints; it emits events
(`dynstep.bytecode_events`) that `dynstep.bytecode_repl` renders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import os
import types
from collections.abc import Callable, Iterator
from typing import Any

from . import _compat
from .bytecode_code import CodeInfo, Row, analyse, resume_title
from .bytecode_commands import Commands
from .bytecode_events import BytecodeStopped
from .bytecode_views import instruction_row
from .errors import UnsupportedTorch
from .events import Info, emit


@dataclasses.dataclass
class Here:
    """Where the program is stopped: the frame, its code's analysis and the next instruction."""

    frame: types.FrameType
    info: CodeInfo
    row: Row


@dataclasses.dataclass
class _GraphCall:
    frame: types.FrameType
    hits_before: int
    stepping_in: bool


class BytecodeStepper(Commands):
    """State between stops; the commands themselves are in `Commands` (``cmd_<name>``)."""

    def __init__(self, frontend: Any) -> None:
        self.frontend = frontend
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
        self.user_vars: dict[str, Any] = {}
        self.list_start: int | None = None
        self.visited: list[types.CodeType] = []   # code objects seen, in first-run order
        self.break_at: set[str] = set()           # "graph": every graph call; "entry": every code's first instruction
        self._running: set[int] = set()           # ids of tracked frames that have started

    # -- hooks (dynstep.bytecode_hooks) --------------------------------------------------------

    def is_tracked(self, code: types.CodeType) -> bool:
        return code in self.infos

    def on_code(self, code: types.CodeType) -> bool:
        if code in self.infos or code in self.failed:
            return code in self.infos
        try:
            info = analyse(code)
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
        if self.next_from is not None and self.next_from[0] is frame:
            self.next_from = None
            self.mode = "step"     # `n` ran off the end of the frame: stop at the next instruction anywhere

    def on_instruction(self, frame: types.FrameType, code: types.CodeType, offset: int) -> None:
        info = self.infos.get(code)
        if info is None or self.detached:
            return
        row = info.row_at(offset)
        if row is None or row.offset != offset:
            return
        from .stepper import STEPPER

        if STEPPER.detached and STEPPER.frontend is self.frontend:
            self.detached = True   # the shared command script ran out inside the graph
            return
        reason, note = self._back_from_graph(frame)
        if reason is None:
            reason = self._reason(frame, info, row)
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
        if self.mode == "next" and self.next_from is not None and self.next_from[0] is frame:
            _, line, region = self.next_from
            if row.line != line or row.region != region:
                return "next"
        return None

    def _is_graph_call(self, info: CodeInfo, row: Row) -> bool:
        return row.offset in info.graph_calls and row.opname != "PRECALL"

    def _enter_graph(self, frame: types.FrameType, *, stepping_in: bool) -> None:
        from .stepper import STEPPER

        self.graph_call = _GraphCall(frame, sum(STEPPER.hits.values()), stepping_in)
        if stepping_in:
            STEPPER.detached = False
            STEPPER.mode = "step"
        elif STEPPER.mode in ("step", "next"):
            STEPPER.mode = "run"   # superstep's step=True asks for a stop at the first node; we decide here

    def _back_from_graph(self, frame: types.FrameType) -> tuple[str | None, str]:
        call = self.graph_call
        if call is None or call.frame is not frame:
            return None, ""
        from .stepper import STEPPER

        self.graph_call = None
        ran_steps = sum(STEPPER.hits.values()) > call.hits_before
        if not call.stepping_in:
            return None, ""
        if not ran_steps:
            STEPPER.mode = "run"
            return "step", ("the graph ran without stopping: it has no step points (it was compiled before "
                            "step_bytecode() started; torch._dynamo.reset() or a recompile inside the context "
                            "gives it some)")
        if STEPPER.mode == "run":          # `c` inside the graph: keep running here too
            self.mode = "continue"
            return None, ""
        STEPPER.mode = "run"
        self.mode = "step"
        self.step_count = 0
        return "return-from-graph", "back from the compiled graph"

    def _stop(self, here: Here, reason: str, note: str = "") -> None:
        self.stopped_once = True
        self.current = here
        self.list_start = None
        self.mode = "continue"
        info, row = here.info, here.row
        note = note or _resume_note(here)
        text = linecache.getline(info.code.co_filename, row.line).strip() if row.line else ""
        emit(BytecodeStopped(reason=reason, code=info.code.co_name, title=info.title, kind=info.kind,
                             file=info.code.co_filename, line=row.line, source_text=text,
                             row=instruction_row(row, self.breakpoints.get(info.code, set())),
                             graph_call=self._is_graph_call(info, row), note=note))
        try:
            self.frontend.run(self, None)
        finally:
            self.current = None

    # -- what front ends call -----------------------------------------------------------------

    def detach(self, why: str) -> None:
        """The front end cannot answer any more (script ran out, end of input): run to the end."""
        from .stepper import STEPPER

        self.detached = True
        self.mode = "continue"
        if STEPPER.frontend is self.frontend:
            STEPPER.detached, STEPPER.mode = True, "run"
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
    name = here.row.argrepr.replace("NULL + ", "")
    if here.row.opname != "LOAD_GLOBAL" or not name.startswith("__resume_at"):
        return ""
    fn = here.frame.f_globals.get(name)
    return f"{name} is the {resume_title(name, getattr(fn, '__code__', None))}"


_ACTIVE: BytecodeStepper | None = None


def active() -> BytecodeStepper | None:
    """The stepper of the open step_bytecode() block, if any."""
    return _ACTIVE


@contextlib.contextmanager
def step_bytecode(*, commands: str | None = None, frontend: str | None = None,
                  route: bool = True) -> Iterator[BytecodeStepper]:
    """Step through Dynamo-produced bytecode run inside the block (see the module docstring).

    commands: scripted commands ("s; stack; c"), default DYNSTEP_COMMANDS; frontend: "repl" or
    "script", default DYNSTEP_FRONTEND, else the REPL on a terminal. route=False leaves the
    compiler alone (for `dynstep run`, which already routes every torch.compile through superstep).
    """
    global _ACTIVE
    from .bytecode_hooks import installed
    from .frontends import make_frontend
    from .stepper import STEPPER

    if _ACTIVE is not None:    # nested (a script under `dynstep run --step-bytecode`): one stepper
        yield _ACTIVE
        return
    missing = _compat.bytecode_hooks_missing()
    if missing is not None:
        raise UnsupportedTorch(f"dynstep's bytecode stepper cannot run here: {missing}. Everything else in "
                               "dynstep (probes, pauses, breakpoints, diff) works on this torch; upgrade torch "
                               "to step through Dynamo's bytecode.")

    commands = commands if commands is not None else (os.environ.get("DYNSTEP_COMMANDS") or None)
    frontend = frontend if frontend is not None else (os.environ.get("DYNSTEP_FRONTEND") or None)
    if frontend not in (None, "repl", "script"):
        raise ValueError(f"step_bytecode(frontend={frontend!r}): the bytecode stepper answers through 'repl' or "
                         "'script' (commands=...); frontend='pdb' is for node stops (superstep option)")
    shared = make_frontend(frontend, commands)
    engine = BytecodeStepper(shared)
    if shared is None:
        emit(Info("dynstep: stdin is not a terminal and no commands were given (commands=, DYNSTEP_COMMANDS); "
                  "step_bytecode() will not stop"))
    saved = (STEPPER.config, STEPPER.frontend, STEPPER.detached, STEPPER.mode)

    def share() -> None:
        # the runtime stepper answers node stops through the same front end (one command queue);
        # its config key is what superstep's step=True options give, so compiling keeps it
        STEPPER.config, STEPPER.frontend = (frontend, commands, True), shared
        STEPPER.detached = shared is None or engine.detached

    share()
    routing = _compat.wrap_dynamo_compiler(_through_superstep(frontend, commands, share)) if route \
        else contextlib.nullcontext()
    try:
        with routing, installed(engine):
            _ACTIVE = engine
            yield engine
    finally:
        _ACTIVE = None
        STEPPER.config, STEPPER.frontend, STEPPER.detached, STEPPER.mode = saved


def _through_superstep(frontend: str | None, commands: str | None,
                       share: Callable[[], None]) -> Callable[[Any], Any]:
    """compiler_fn -> a superstep backend with step points and compiler_fn as the inner compiler."""

    def wrap(compiler_fn: Any) -> Any:
        from .backends.superstep import superstep

        stepping = superstep(inner=compiler_fn, step=True, frontend=frontend, commands=commands)

        def backend(gm: Any, example_inputs: Any) -> Any:
            try:
                return stepping(gm, example_inputs)
            finally:
                share()   # a user backend that is itself superstep configured the stepper its own way

        backend.__name__ = f"superstep[{getattr(compiler_fn, '__name__', 'backend')}]"
        return backend

    return wrap
