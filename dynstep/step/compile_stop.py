"""The compile-time half of `dynstep.breakpoint()`: what Dynamo knows at that line, and its commands.

Engine only: `CompileStop` is built while Dynamo traces; `CompileStopCommands.execute(line)`
emits `CompileViewShown` events (typed `CompileView`s) and returns True on `continue`. The front
end that answers stops renders them (`dynstep.front.repl`).

    cmds = CompileStopCommands(stop)
    cmds.execute("locals")          # emits CompileViewShown(CompileView("locals", ...))
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.commands import CommandSet
from ..core.commands import names as command_names_of
from ..core.errors import Abort
from ..core.events import CompileView, CompileViewShown, emit

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


class CompileStopCommands(CommandSet):
    """Commands at a compile-time stop. Each `cmd_<name>` docstring is its help."""

    aliases = {"c": "continue", "p": "print", "l": "locals", "g": "graph", "q": "quit", "h": "help",
               "where": "bt", "w": "bt"}

    def __init__(self, stop: CompileStop, fake_locals: dict[str, Any] | None = None) -> None:
        self.stop = stop
        self.fake_locals = fake_locals or {}

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

    def cmd_guards(self, arg: str) -> None:
        """guards: the guards installed so far (and symbolic shape guards)."""
        shape = tuple(f"shape: {g}" for g in self.stop.shape_guards)
        emit(CompileViewShown(View("guards", "guards so far", self.stop.guards + shape)))

    def cmd_bt(self, arg: str) -> None:
        """bt, where, w: the inlined frames Dynamo is tracing, outermost first; graph breaks seen so far."""
        breaks = tuple(f"graph break: {b}" for b in self.stop.graph_breaks)
        emit(CompileViewShown(View("bt", "backtrace", self.stop.backtrace + breaks)))

    def cmd_print(self, arg: str) -> None:
        """print, p NAME: one local as Dynamo sees it (a FakeTensor's size, stride, dtype, device)."""
        info = {x.name: x for x in self.stop.locals}
        if arg not in info:
            raise ValueError(f"no such local {arg!r}; locals: {', '.join(info) or 'none'}")
        fake = self.fake_locals.get(arg)
        lines = [f"{arg} = {info[arg].text}"]
        if fake is not None and hasattr(fake, "stride"):
            lines.append(f"stride {tuple(fake.stride())}  requires_grad {fake.requires_grad}")
        emit(CompileViewShown(View("value", arg, tuple(lines))))

    def cmd_continue(self, arg: str) -> bool:
        """continue, c: continue compiling (the runtime half stops later, with real values)."""
        return True

    def cmd_quit(self, arg: str) -> None:
        """quit, q: stop the program (raises dynstep.Abort)."""
        raise Abort(f"quit at the compile-time stop at {self.stop.location}")


def command_names() -> list[str]:
    return command_names_of(CompileStopCommands)
