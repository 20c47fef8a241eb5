"""The compile-time half of `dynstep.breakpoint()`: what Dynamo knows at that line, and its commands.

Engine only: `CompileStop` is built while Dynamo traces; `CompileStopCommands.execute(line)` returns
typed `View` events and whether to continue. A front end renders the views (`dynstep.bp_console`).

    cmds = CompileStopCommands(stop)
    views, done = cmds.execute("locals")
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import commandset
from .errors import Abort


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
class View:
    """Something to show: kind in {"stop", "locals", "graph", "guards", "bt", "value", "help", "error"}."""

    kind: str
    title: str
    lines: tuple[str, ...]


class CompileStopCommands:
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

    def execute(self, line: str) -> tuple[list[View], bool]:
        name, _, arg = line.strip().partition(" ")
        if not name:
            return [], False
        name = self.aliases.get(name, name)
        method = getattr(self, f"cmd_{name}", None)
        if method is None:
            return [View("error", "unknown command", (f"{name!r}; try: {', '.join(command_names())}",))], False
        return method(arg.strip())

    def cmd_locals(self, arg: str) -> tuple[list[View], bool]:
        """locals: the symbolic locals (FakeTensor shape/dtype/device, symbolic sizes, constants)."""
        rows = tuple(f"{x.name} = {x.text}" for x in self.stop.locals)
        shape = tuple(f"guard: {g}" for g in self.stop.shape_guards)
        return [View("locals", "symbolic locals", rows + shape)], False

    def cmd_graph(self, arg: str) -> tuple[list[View], bool]:
        """graph: the FX graph traced so far in this frame."""
        return [View("graph", "graph so far", tuple(self.stop.graph.strip("\n").splitlines()))], False

    def cmd_guards(self, arg: str) -> tuple[list[View], bool]:
        """guards: the guards installed so far (and symbolic shape guards)."""
        return [View("guards", "guards so far", self.stop.guards + tuple(f"shape: {g}" for g in self.stop.shape_guards))], False

    def cmd_bt(self, arg: str) -> tuple[list[View], bool]:
        """bt: the inlined frames Dynamo is tracing, outermost first; graph breaks seen so far."""
        breaks = tuple(f"graph break: {b}" for b in self.stop.graph_breaks)
        return [View("bt", "backtrace", self.stop.backtrace + breaks)], False

    def cmd_print(self, arg: str) -> tuple[list[View], bool]:
        """p NAME: one local as Dynamo sees it (a FakeTensor's size, stride, dtype, device)."""
        info = {x.name: x for x in self.stop.locals}
        if arg not in info:
            return [View("error", "no such local", (f"{arg!r}; locals: {', '.join(info) or 'none'}",))], False
        fake = self.fake_locals.get(arg)
        lines = [f"{arg} = {info[arg].text}"]
        if fake is not None and hasattr(fake, "stride"):
            lines.append(f"stride {tuple(fake.stride())}  requires_grad {fake.requires_grad}")
        return [View("value", arg, tuple(lines))], False

    def cmd_continue(self, arg: str) -> tuple[list[View], bool]:
        """c: continue compiling (the runtime half stops later, with real values)."""
        return [], True

    def cmd_quit(self, arg: str) -> tuple[list[View], bool]:
        """q: stop the program (raises dynstep.Abort)."""
        raise Abort(f"quit at the compile-time stop at {self.stop.location}")

    def cmd_help(self, arg: str) -> tuple[list[View], bool]:
        """help: list the commands."""
        rows = tuple((getattr(self, f"cmd_{n}").__doc__ or n).strip() for n in command_names())
        return [View("help", "compile-time commands", rows)], False


def command_names() -> list[str]:
    return commandset.names(CompileStopCommands)
