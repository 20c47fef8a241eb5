"""The compile-time half of `dynstep.breakpoint()`: what Dynamo knows at that line, and its commands.

Engine only: `CompileStop` is built while Dynamo traces; `CompileStopCommands.execute(line)`
emits `CompileViewShown` events (typed `CompileView`s) and returns True on `continue`. The front
end that answers stops renders them (`dynstep.front.repl`).

    cmds = CompileStopCommands(stop, fakes, Scope(names, quiet))
    cmds.execute("locals")          # emits CompileViewShown(CompileView("locals", ...))
    cmds.execute("p h.shape[0] * 2, graph.nodes, guards[0]")   # any expression: Evaluated(...)

`p EXPR` sees the symbolic locals as Dynamo holds them (FakeTensors with their symbolic shapes,
SymInts, Python constants as values, modules and objects as themselves), `graph` (a copy of the FX
graph traced so far), `guards` (`Guard`s), `shape_guards` (sympy expressions) and `ctx` (torch's
ComptimeContext, for what `comptime.breakpoint()` users know: ``ctx.get_local('h').as_fake()``).
It runs with the shape environment's guards suppressed: looking never specialises the graph.

The runtime stop of the same breakpoint keeps this stop (`CONTEXTS`), so `graph`, `guards` and
`locals` work there too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from ..core.command_table import COMPILE_STOP
from ..core.commands import CommandSet
from ..core.commands import names as command_names_of
from ..core.errors import Abort
from ..core.events import CompileView, CompileViewShown, Evaluated, emit

View = CompileView


@dataclasses.dataclass(frozen=True)
class LocalInfo:
    name: str
    kind: str        # "tensor" | "symint" | "constant" | "other"
    text: str        # FakeTensor f32[s77, 3] cpu, s77, 'add', <class 'Foo'>, ...


@dataclasses.dataclass(frozen=True)
class CompileStop:
    function: str
    file: str
    line: int
    code: str
    compile_id: str
    recompile_reason: str | None
    locals: tuple[LocalInfo, ...]
    graph: str
    guards: tuple[str, ...]
    shape_guards: tuple[str, ...]
    backtrace: tuple[str, ...]
    graph_breaks: tuple[str, ...]
    occurrence: int          # nth dynstep.breakpoint() call at this line in this compile (unrolled loops)
    runtime_site: int | None  # the runtime breakpoint node's id, None with run=False

    @property
    def location(self) -> str:
        import os

        return f"{os.path.basename(self.file)}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Guard:
    """One guard Dynamo installed so far: what it guards (``L['x']``) and how (``TENSOR_MATCH``)."""

    source: str
    kind: str


@dataclasses.dataclass
class Scope:
    """What `p EXPR` sees at a compile-time stop (live objects: it stays with the commands, never a
    front end's business), and the context that keeps evaluating from adding guards."""

    names: dict[str, Any]
    quiet: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


class CompileContexts:
    """The compile-time stop behind each runtime breakpoint site, for `graph`/`guards`/`locals` there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_breakpoint: dict[int, CompileStop] = {}
        self._by_site: dict[int, CompileStop] = {}

    def put(self, breakpoint_id: int, stop: CompileStop) -> None:
        with self._lock:
            self._by_breakpoint[breakpoint_id] = stop

    def link(self, site_id: int, breakpoint_id: int) -> None:
        """The runtime stepper's site `site_id` stands for breakpoint `breakpoint_id`."""
        with self._lock:
            stop = self._by_breakpoint.get(breakpoint_id)
            if stop is not None:
                self._by_site[site_id] = stop

    def of_site(self, site_id: int) -> CompileStop | None:
        return self._by_site.get(site_id)


CONTEXTS = CompileContexts()


class CompileStopCommands(CommandSet):
    """Commands at a compile-time stop. Each `cmd_<name>` docstring is its help."""

    aliases = COMPILE_STOP.aliases   # the one table of this set's commands: dynstep/core/command_table.py
    without_stop = COMPILE_STOP.without_stop

    def __init__(self, stop: CompileStop, fake_locals: dict[str, Any] | None = None,
                 scope: Scope | None = None) -> None:
        self.stop = stop
        self.fake_locals = fake_locals or {}
        self.scope = scope or Scope(dict(self.fake_locals))

    def header(self) -> View:
        s = self.stop
        lines = [f"{s.location}    {s.code}", f"compile {s.compile_id}" +
                 (f"   recompiled because: {s.recompile_reason}" if s.recompile_reason else "") +
                 (f"   (occurrence {s.occurrence} of this line in the graph)" if s.occurrence else "")]
        return View("stop", f"compile-time stop in {s.function}", tuple(lines))

    def cmd_locals(self, arg: str) -> None:
        """locals, l: the symbolic locals (FakeTensor shape/dtype/device, symbolic sizes, constants)."""
        rows = tuple(f"{x.name} = {x.text}" for x in self.stop.locals)
        shape = tuple(f"guard: {g}" for g in self.stop.shape_guards)
        emit(CompileViewShown(View("locals", "symbolic locals", rows + shape)))

    def cmd_graph(self, arg: str) -> None:
        """graph, g: the FX graph traced so far in this frame."""
        emit(CompileViewShown(View("graph", "graph so far", tuple(self.stop.graph.strip("\n").splitlines()))))

    def cmd_code(self, arg: str) -> None:
        """code [dynamo]: what exists of this compile yet: Dynamo's graph so far (the other stages come after tracing)."""
        if arg.split(" ")[0] not in ("", "dynamo"):
            raise ValueError(f"compile {self.stop.compile_id} is still being traced: only its Dynamo graph exists "
                             "(code dynamo); AOTAutograd and Inductor run when Dynamo has finished this frame, and "
                             "`code` at the runtime stop of this breakpoint shows every stage")
        self.cmd_graph("")

    def cmd_guards(self, arg: str) -> None:
        """guards: the guards installed so far (and symbolic shape guards)."""
        shape = tuple(f"shape: {g}" for g in self.stop.shape_guards)
        emit(CompileViewShown(View("guards", "guards so far", self.stop.guards + shape)))

    def cmd_bt(self, arg: str) -> None:
        """bt, where, w: the inlined frames Dynamo is tracing, outermost first; graph breaks seen so far."""
        breaks = tuple(f"graph break: {b}" for b in self.stop.graph_breaks)
        emit(CompileViewShown(View("bt", "backtrace", self.stop.backtrace + breaks)))

    def cmd_print(self, arg: str) -> None:
        """print, p EXPR: a local as Dynamo sees it, or any expression over the symbolic locals, graph, guards, ctx."""
        info = {x.name: x for x in self.stop.locals}
        if not arg:
            raise ValueError(f"an expression is needed, e.g. p {next(iter(info), 'x')}.shape; locals: "
                             f"{', '.join(info) or 'none'}; also graph, guards, shape_guards, ctx")
        if arg in info:
            fake = self.fake_locals.get(arg)
            lines = [f"{arg} = {info[arg].text}"]
            if fake is not None and hasattr(fake, "stride"):
                lines.append(f"stride {tuple(fake.stride())}  requires_grad {fake.requires_grad}")
            emit(CompileViewShown(View("value", arg, tuple(lines))))
            return
        code = compile(arg, "<dynstep compile>", "eval")
        with self.scope.quiet():
            try:
                value = eval(code, {"__builtins__": __builtins__}, dict(self.scope.names))
            except NameError as exc:
                raise NameError(f"{exc}; at a compile-time stop the names are the locals ({', '.join(info) or 'none'}),"
                                " graph, guards, shape_guards and ctx") from None
            text = describe_value(value)
        emit(Evaluated(arg, text, None))

    def cmd_continue(self, arg: str) -> bool:
        """continue, c: continue compiling (the runtime half stops later, with real values)."""
        return True

    def cmd_quit(self, arg: str) -> None:
        """quit, q: stop the program (raises dynstep.Abort)."""
        raise Abort(f"quit at the compile-time stop at {self.stop.location}")


def describe_value(value: Any) -> str:
    """A value at a compile-time stop as text: FakeTensors by shape (they have no values), the rest by repr."""
    shape, dtype, device = (getattr(value, k, None) for k in ("shape", "dtype", "device"))
    if type(value).__name__ == "FakeTensor" and shape is not None:
        return f"FakeTensor {str(dtype).replace('torch.', '')}{list(shape)} {device}"
    if isinstance(value, (tuple, list)) and any(type(v).__name__ == "FakeTensor" for v in value):
        inner = ", ".join(describe_value(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    try:
        text = repr(value)
    except Exception as exc:   # a repr that raises must not end the stop
        return f"<{type(value).__name__}: repr failed: {exc}>"
    return text if len(text) <= 2000 else text[:2000] + f"... ({len(text)} characters)"


def command_names() -> list[str]:
    return command_names_of(CompileStopCommands)
