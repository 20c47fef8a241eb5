"""The command tables of dynstep's three command sets: each command's name, its aliases, whether it
resumes the program, whether it works while the program runs, and which Debug Adapter Protocol
requests mean it.

One table per set serves every way in: the terminal REPL and scripted commands (`CommandSet`'s
aliases and `without_stop` come from it), the DAP resume requests (`dap/frontend.py`,
`dap/bytecodeview.py` ask `for_request`), the DAP console, and `dynstep attach`, which turns a typed
resume command back into the DAP request the server maps to it (`request_for`). A test checks that
each table names exactly its set's ``cmd_<name>`` methods.

    NODE_STOP.aliases["s"]                     -> "step"
    NODE_STOP.for_request("next")              -> "step"      (DAP's step over: the next node)
    NODE_STOP.request_for("n")                 -> "stepIn"
    BYTECODE_STOP.for_request("next", {"granularity": "instruction"}) -> "step"
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    aliases: tuple[str, ...] = ()
    resumes: bool = False        # the program runs on after it
    anytime: bool = False        # works while the program runs (all others need a stop)
    dap: tuple[str, ...] = ()    # the DAP requests that run it ("next:instruction": with that granularity)
    meaning: str = ""            # what it does, in DAP terms where it has one


class CommandTable:
    """One command set's commands (see the module docstring)."""

    def __init__(self, where: str, commands: Iterable[Command]) -> None:
        self.where = where
        self.commands = {c.name: c for c in commands}
        self.aliases: Mapping[str, str] = {a: c.name for c in self.commands.values() for a in c.aliases}
        self.without_stop = frozenset(c.name for c in self.commands.values() if c.anytime)
        self.resuming = frozenset(c.name for c in self.commands.values() if c.resumes)
        self._requests = {r: c.name for c in self.commands.values() for r in c.dap}

    def words(self, names: Iterable[str]) -> frozenset[str]:
        """These commands' names and aliases: what a user may type for them."""
        wanted = set(names)
        return frozenset(wanted | {a for a, name in self.aliases.items() if name in wanted})

    def name_of(self, typed: str) -> str:
        """A command's full name from what a user typed (a name or an alias)."""
        return self.aliases.get(typed, typed)

    def for_request(self, request: str, arguments: Mapping[str, Any] | None = None) -> str:
        """The resuming command a DAP request runs at a stop here (`next` with
        ``granularity: "instruction"`` first looks for ``next:instruction``)."""
        granularity = (arguments or {}).get("granularity")
        if granularity:
            name = self._requests.get(f"{request}:{granularity}")
            if name is not None:
                return name
        try:
            return self._requests[request]
        except KeyError:
            raise LookupError(f"the DAP request {request!r} does not resume a program at {self.where}; "
                              f"these do: {', '.join(sorted({r.split(':')[0] for r in self._requests}))}") from None

    def request_for(self, typed: str) -> str | None:
        """The DAP request that runs a resuming command typed by a user (None: not a resuming command
        with a request of its own)."""
        command = self.commands.get(self.name_of(typed))
        if command is None or not command.resumes:
            return None
        return next((r for r in command.dap if ":" not in r), None)


NODE_STOP = CommandTable("a node stop", [
    Command("continue", ("c", "cont"), resumes=True, dap=("continue",),
            meaning="run on to the next pause selector or breakpoint hit (DAP continue)"),
    Command("step", ("s",), resumes=True, dap=("next",),
            meaning="run the next node, whatever it is (DAP next: step over one node)"),
    Command("next", ("n",), resumes=True, dap=("stepIn",),
            meaning="run to the next pause-selected node of this graph, or into the next graph (DAP stepIn)"),
    Command("out", (), resumes=True, dap=("stepOut",),
            meaning="run to the first node of the next graph call (DAP stepOut)"),
    Command("print", ("p",)), Command("set"), Command("where", ("w",)), Command("graph", ("g",)),
    Command("locals"), Command("guards"), Command("code"), Command("record"), Command("native"),
    Command("ranks"),
    Command("break", ("b",), anytime=True), Command("clear", ("cl",), anytime=True), Command("watch", anytime=True),
    Command("quit", ("q", "exit")), Command("help", ("h", "?"), anytime=True),
])

BYTECODE_STOP = CommandTable("a stop in Dynamo's bytecode", [
    Command("step", ("s",), resumes=True, dap=("stepIn", "next:instruction"),
            meaning="run one instruction; at the graph call, into the graph (DAP stepIn)"),
    Command("next", ("n",), resumes=True, dap=("next",),
            meaning="run to the next line or part of Dynamo's output (DAP next)"),
    Command("continue", ("c", "cont"), resumes=True, dap=("continue", "stepOut"),
            meaning="run on to the next breakpoint (DAP continue; stepOut runs on too)"),
    Command("return", ("r",), resumes=True, meaning="run until the selected frame is about to return"),
    Command("print", ("p",)), Command("list", ("l",)), Command("longlist", ("ll",)), Command("source", ("src",)),
    Command("decompiled", ("dc",)), Command("backtrace", ("bt", "where", "w")), Command("stack"),
    Command("locals"), Command("globals"), Command("guards"), Command("code"),
    Command("up", ("u",)), Command("down", ("d",)), Command("catch"),
    Command("break", ("b",)), Command("clear", ("cl",)),
    Command("quit", ("q", "exit")), Command("help", ("h", "?"), anytime=True),
])

COMPILE_STOP = CommandTable("a compile-time stop", [
    Command("continue", ("c",), resumes=True, dap=("continue", "next", "stepIn", "stepOut"),
            meaning="let the compile go on (every DAP resume request)"),
    Command("print", ("p",)), Command("locals", ("l",)), Command("graph", ("g",)), Command("bt", ("where", "w")),
    Command("guards"), Command("code"),
    Command("quit", ("q",)), Command("help", ("h",), anytime=True),
])


TABLES = (NODE_STOP, BYTECODE_STOP, COMPILE_STOP)

# The DAP requests that resume a stopped program, at any kind of stop: the union of the tables'.
RESUME_REQUESTS = frozenset(r.split(":")[0] for t in TABLES for c in t.commands.values() if c.resumes for r in c.dap)
