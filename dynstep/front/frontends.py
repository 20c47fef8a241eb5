"""Front ends of the stepper that need no terminal (scripted commands, the Python debugger), and
the factory the composition root installs (`make_frontend`).

Which one answers a stop is chosen by the `frontend` and `commands` options (or DYNSTEP_FRONTEND,
DYNSTEP_COMMANDS):

    commands="p value.mean(); s; c"   ScriptFrontend: one command per `;` or line; when the
                                       script runs out, the program runs to the end
    frontend="pdb"                     PdbFrontend: sys.breakpointhook() (PEP 553) from a frame
                                       whose locals are the value, the node's inputs and context
    frontend="repl" (default)          dynstep.front.repl.ReplFrontend when stdin is a terminal;
                                       otherwise a one-time warning and no stops (never hangs)
"""

from __future__ import annotations

import bdb
import collections
import os
import sys
from typing import TYPE_CHECKING, Any

from ..core.commands import split_commands
from ..core.errors import Abort
from ..core.events import CommandFailed, CommandRead, emit
from ..core.wiring import Frontend
from ..jobs.identity import current as current_identity

if TYPE_CHECKING:
    from ..step.stepper import Stepper, Stop


def make_frontend(kind: str | None, commands: str | None) -> "Frontend | None":
    """The front end for an options pair, or None when nothing can answer (the caller detaches)."""
    if commands is not None and kind in (None, "script"):
        return ScriptFrontend(commands)
    if kind == "pdb":
        return PdbFrontend()
    if kind == "script":
        return ScriptFrontend("")
    ident = current_identity()
    if ident.multi:   # a rank of a distributed job: its prompt on the launcher's terminal
        from .jobs_repl import rank_repl

        return rank_repl(ident.rank)
    if sys.stdin is not None and sys.stdin.isatty():
        from .repl import ReplFrontend

        return ReplFrontend()
    return None


class ScriptFrontend(Frontend):
    """Feeds a fixed list of commands across all stops of the run, in order."""

    shares_terminal = True   # a distributed job: one paused rank at a time talks to the terminal
    reads_lines = True

    def __init__(self, script: str) -> None:
        self.queue = collections.deque(split_commands(script))

    def read(self, prompt: str) -> str | None:
        """The next scripted command (shared by every kind of stop), None when the script ran out.
        Shown as read, so a transcript reads like a session."""
        if not self.queue:
            return None
        line = self.queue.popleft()
        emit(CommandRead(line))
        return line

    def run(self, stepper: "Stepper", stop: "Stop") -> None:
        while True:
            line = self.read("")
            if line is None:
                stepper.detach("dynstep: scripted commands ran out; continuing to the end")
                return
            if stepper.execute(line):
                return


class PdbFrontend(Frontend):
    """Calls `sys.breakpointhook()` with the stop's tensors as the frame's locals.

    In the debugger: `value` is the live tensor (in-place edits such as `value.clamp_(-1, 1)`
    are what later nodes see; rebinding `value = ...` is written back when the debugger
    continues), the node's inputs are bound by their FX names, `site` describes the node, and
    `dynstep_cmd("s")` runs any stepper command (here: stop again after the next node).
    """

    shares_terminal = True   # a distributed job: one paused rank at a time talks to the terminal

    def run(self, stepper: "Stepper", stop: "Stop") -> None:
        site = stop.site
        if not _debugger_can_answer():
            stepper.detach("dynstep: frontend 'pdb' needs a terminal for the default debugger (stdin is not a tty); "
                           "not stopping, running to the end (PYTHONBREAKPOINT chooses another debugger)")
            return
        frame_locals = {**stop.inputs, "value": stop.value, "site": site, "node": site.node,
                        "target": site.target, "module": site.module, "source": site.source,
                        "reason": stop.reason, "dynstep_cmd": stepper.execute}
        if site.user_name:
            frame_locals[site.user_name] = stop.value
        original = stop.value
        _in_debugger(f"<dynstep stop {site.node}>", frame_locals, f"node {site.node} ({site.source or site.graph})")
        if frame_locals["value"] is not original:
            try:
                stepper.write_value(stop, frame_locals["value"])
            except ValueError as exc:   # `value = "abc"` in pdb: say so, the program goes on unchanged
                emit(CommandFailed("value = ... (in the debugger)", str(exc)))

    def compile_stop(self, stop: Any, fakes: dict[str, Any]) -> None:
        """dynstep.breakpoint()'s compile-time stop: a frame holding the fake locals (and graph, guards, ctx)."""
        if not _debugger_can_answer():
            return
        frame_locals = {"stop": stop, "graph": stop.graph, "guards": stop.guards, "locals_": stop.locals, **fakes}
        _in_debugger(f"<dynstep compile-time stop {stop.location}>", frame_locals,
                     f"the compile-time stop at {stop.location}")

    def __repr__(self) -> str:
        return "PdbFrontend()"


def _debugger_can_answer() -> bool:
    """The default debugger (pdb) reads stdin: without a terminal it would end in BdbQuit at once."""
    custom = sys.breakpointhook is not sys.__breakpointhook__ or \
        os.environ.get("PYTHONBREAKPOINT", "") not in ("", "pdb.set_trace")
    return custom or (sys.stdin is not None and sys.stdin.isatty())


def _in_debugger(name: str, frame_locals: dict[str, Any], where: str) -> None:
    """sys.breakpointhook() from a frame whose f_locals *is* `frame_locals` (exec gives pdb, ipdb and
    debugpy every name; a rebinding of `value` can be read back afterwards). Quitting the debugger
    stops the program as `quit` does."""
    try:
        exec(compile("__import__('sys').breakpointhook()", name, "exec"), {"__builtins__": __builtins__},
             frame_locals)
    except bdb.BdbQuit:
        raise Abort(f"quit in the debugger at {where}: program stopped from the debugger") from None
