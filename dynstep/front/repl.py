"""The terminal front end of the stepper: a `(dynstep)` prompt with line editing and history,
and the rich rendering of every stepper event (also used for scripted runs).

    ── paused · graph forward[0/0] · node c_proj · torch.nn.functional.linear · blocks.0.attn
       model.py:33    out = self.c_proj(attn)
       f32[2, 16, 32] cpu  min -1.2  max 1.3  mean 0.01 ...   [0.12, -0.4, ...]
    (dynstep) p value[0, :2, :4]

Ctrl-C at the prompt is `quit` (the program stops with dynstep.Abort); Ctrl-D is `continue`
to the end without further stops.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .text import tensor_text
from ..core.wiring import Frontend
from ..core.events import (CommandFailed, CommandRead, CompileViewShown, Evaluated, GraphShown, HelpShown, Info, Resumed, Stopped,
                     WhereShown)

if TYPE_CHECKING:
    from ..step.stepper import Stepper, Stop

PROMPT = "(dynstep) "
HISTORY = os.path.expanduser("~/.dynstep_history")
_console = Console(stderr=True, highlight=False, soft_wrap=True)


class ReplFrontend(Frontend):
    """Reads commands from the terminal with `readline` (editing and history) until one resumes."""

    shares_terminal = True   # a distributed job: one paused rank at a time talks to the terminal
    reads_lines = True

    def __init__(self) -> None:
        self._readline = _setup_readline()

    def read(self, prompt: str) -> str | None:
        """One line from the terminal (None at end of input); Ctrl-C reads as `quit`."""
        try:
            return self._input(prompt)
        except EOFError:
            return None
        except KeyboardInterrupt:
            _console.print()
            return "quit"

    def run(self, stepper: "Stepper", stop: "Stop") -> None:
        while True:
            try:
                line = self._input(PROMPT)
            except EOFError:
                stepper.detach("dynstep: end of input; continuing to the end")
                return
            except KeyboardInterrupt:
                _console.print()
                line = "quit"
            if self._readline is not None and line.strip():
                try:
                    self._readline.write_history_file(HISTORY)
                except OSError:
                    pass   # history is a convenience; an unwritable home must not stop the session
            if stepper.execute(line):
                return


    def _input(self, prompt: str) -> str:
        return input(prompt)


def use_console(console: Console) -> None:
    """Render the stepper's events on another console (a distributed job's rank: the launcher's terminal)."""
    global _console
    _console = console


def _setup_readline():
    try:
        import readline
    except ImportError:   # Windows without pyreadline: plain input() still works
        return None
    try:
        readline.read_history_file(HISTORY)
    except OSError:
        pass   # no history yet
    return readline


def render(event: object, console: Console | None = None) -> None:
    """Show one stepper event on the terminal (stderr, so the program's stdout stays its own)."""
    c = console or _console
    if isinstance(event, Stopped):
        _stopped(c, event)
    elif isinstance(event, Evaluated):
        c.print(Text(f"{event.expr} = ", style="bold") + Text(event.text))
        if event.tensor is not None:
            c.print("   " + tensor_text(event.tensor), style="dim")
    elif isinstance(event, WhereShown):
        _where(c, event)
    elif isinstance(event, GraphShown):
        _graph(c, event)
    elif isinstance(event, HelpShown):
        table = Table(show_header=False, box=None)
        for name, doc in event.entries:
            table.add_row(Text(name, style="bold"), doc)
        c.print(table)
    elif isinstance(event, CommandRead):
        c.print(Text(PROMPT + event.line, style="bold"))
    elif isinstance(event, CommandFailed):
        c.print(Text(f"error: {event.command}: {event.message}", style="red"))
    elif isinstance(event, Info):
        c.print(Text(event.message, style="yellow" if event.message.startswith("dynstep:") else ""))
    elif isinstance(event, Resumed):
        pass
    elif isinstance(event, CompileViewShown):
        _compile_view(c, event.view)
    else:
        from .bytecode_repl import render as render_bytecode   # the bytecode stepper's events
        from .native_show import render as render_native       # `native`, `native break`
        from .stages_show import render as render_stage        # `code [stage]`

        if not render_bytecode(event, c) and not render_native(event, c) and not render_stage(event, c):
            c.print(repr(event))


def _stopped(c: Console, e: Stopped) -> None:
    s = e.site
    label = {"pause": "paused", "break": "breakpoint", "step": "step", "nan": "non-finite"}.get(e.reason, e.reason)
    if s.kind == "grad":
        label += " at the gradient"
    parts = [f"graph {s.graph}", f"node {s.node}", s.target] + ([s.module] if s.module else [])
    c.print(Text(f"── {label} · " + " · ".join(parts) + (f" · call {e.call}" if e.call else ""), style="bold cyan"))
    if s.source:
        c.print(Text(f"   {s.source:<16} ", style="dim"), end="")
        c.print(Syntax(s.source_text or "", "python", theme="ansi_dark", background_color="default"))
    if e.tensor is not None:
        c.print("   " + tensor_text(e.tensor))
    if e.note:
        c.print(Text("   " + e.note, style="red"))
    if not e.writable:
        c.print(Text("   (read-only stop: set value is not possible here)", style="dim"))
    for expr, text in e.watches:
        c.print(Text(f"   watch {expr} = {text}", style="magenta"))


def _compile_view(c: Console, view) -> None:
    if view.kind == "stop":
        c.print(Text(f"── {view.title}", style="bold magenta"))
        for line in view.lines:
            c.print("   " + line)
    elif view.kind == "graph":
        c.print(Syntax("\n".join(view.lines), "python", theme="ansi_dark", background_color="default"))
    elif view.kind == "error":
        c.print(Text(f"error: {view.title}: " + " ".join(view.lines), style="red"))
    else:
        c.print(Text(view.title, style="bold"))
        for line in view.lines:
            c.print("   " + line, markup=False, highlight=False)


def _where(c: Console, e: WhereShown) -> None:
    c.print(Text(f"node {e.node} · {e.target} · module {e.module or '<top>'}", style="bold"))
    if e.lines:
        code = "\n".join(text for _, text in e.lines)
        c.print(Text(e.file, style="dim"))
        c.print(Syntax(code, "python", line_numbers=True, start_line=e.lines[0][0], highlight_lines={e.line},
                       theme="ansi_dark", background_color="default"))
    else:
        c.print(Text("(no source line for this node)", style="dim"))
    if e.stack:
        c.print(Text("called from:", style="bold"))
        for frame in e.stack:
            c.print(Text("  " + frame, style="dim"))


def _graph(c: Console, e: GraphShown) -> None:
    table = Table(title=f"graph {e.graph}", box=None, header_style="bold")
    for col in ("", "node", "op", "module", "source"):
        table.add_column(col, overflow="fold")
    for row in e.rows:
        here = row.node == e.current
        table.add_row("→" if here else "", row.node, row.target.rsplit(".", 1)[-1], row.module or "-", row.source,
                      style="bold reverse" if here else None)
    c.print(table)

