"""Terminal rendering of the bytecode stepper's events (rich, on stderr).

    ── step · resume of f after line 9 · #19 [106] CALL 1 · graph call
       story.py:9    print("break")
       s here steps into the compiled graph

`dynstep.front.repl.render` hands every event it does not know to `render`; the prompt and command
reading are the runtime stepper's own (`dynstep.front.repl.ReplFrontend`, `dynstep.front.frontends`).
"""

from __future__ import annotations

import linecache
import os

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from ..bytecode.events import (BytecodeShown, BytecodeStopped, DecompiledShown, FrameSelected, FramesShown,
                              GuardsShown, InstructionRow, SourceShown, ValuesShown)

_LABEL = {"entry": "entered Dynamo code", "step": "step", "next": "next", "break": "breakpoint",
          "return-from-graph": "back from graph", "return": "return", "exception": "exception"}


def render(event: object, c: Console) -> bool:
    """Show one bytecode-stepper event; False when the event is not one of them."""
    handler = _HANDLERS.get(type(event))
    if handler is None:
        return False
    handler(c, event)
    return True


def _stopped(c: Console, e: BytecodeStopped) -> None:
    r = e.row
    c.print(Text(f"── {_LABEL.get(e.reason, e.reason)} · {e.title} · #{r.index} [{r.offset}] {r.text} · {r.region}",
                 style="bold cyan"))
    if e.line is not None:
        c.print(Text(f"   {os.path.basename(e.file)}:{e.line:<6}", style="dim"), end="")
        c.print(Syntax(e.source_text or "", "python", theme="ansi_dark", background_color="default"))
    if r.side_effect:
        c.print(Text("   side-effect replay on a Python object", style="magenta"))
    if e.graph_call:
        c.print(Text("   the compiled graph is called here: s steps into its first node, n steps over it",
                     style="yellow"))
    if e.note:
        c.print(Text("   " + e.note, style="red" if e.reason == "exception" else "yellow"))


def _frame_selected(c: Console, e: FrameSelected) -> None:
    r = e.row
    c.print(Text(f"── frame {e.level} of {e.count - 1} · {e.title} · #{r.index} [{r.offset}] {r.text} · {r.region}",
                 style="bold cyan"))
    if e.line is not None:
        c.print(Text(f"   {os.path.basename(e.file)}:{e.line:<6}", style="dim"), end="")
        c.print(Syntax(linecache.getline(e.file, e.line).strip(), "python", theme="ansi_dark",
                       background_color="default"))


def _row_text(r: InstructionRow, current: int) -> Text:
    mark = "→" if r.index == current else " "
    bp = "*" if r.breakpoint else " "
    line = f"{r.line}" if r.line is not None else ""
    text = Text(f"{mark}{bp} #{r.index:<3} [{r.offset:>4}] {r.text:<48} {line:>5}  {r.region}")
    if r.side_effect:
        text.append("  side effect", style="magenta")
    if r.index == current:
        text.stylize("bold reverse")
    return text


def _bytecode(c: Console, e: BytecodeShown) -> None:
    c.print(Text(f"bytecode of {e.title}  (→ next instruction, * breakpoint; columns: index, offset, "
                 "instruction, source line, part)", style="bold"))
    for r in e.rows:
        c.print(_row_text(r, e.current))


def _source(c: Console, e: SourceShown) -> None:
    c.print(Text(f"source {e.file}" + (f" (line {e.line} marked)" if e.line else ""), style="bold"))
    if not e.lines:
        c.print(Text("   (source not available)", style="dim"))
        return
    code = "\n".join(t for _, t in e.lines)
    c.print(Syntax(code, "python", line_numbers=True, start_line=e.lines[0][0],
                   highlight_lines={e.line} if e.line else set(), theme="ansi_dark", background_color="default"))


def _decompiled(c: Console, e: DecompiledShown) -> None:
    c.print(Text(f"decompiled {e.title}: {e.reason}", style="bold"))
    if e.source:
        c.print(Syntax(e.source, "python", theme="ansi_dark", background_color="default", line_numbers=bool(e.mark),
                       highlight_lines={e.mark} if e.mark else set()))


def _values(c: Console, e: ValuesShown) -> None:
    c.print(Text(e.title, style="bold"))
    for name, text in e.entries:
        c.print(Text(f"  {name} = ", style="bold") + Text(text))
    if e.note:
        c.print(Text("  " + e.note, style="dim"))


def _guards(c: Console, e: GuardsShown) -> None:
    c.print(Text(f"guards of {e.function} ({len(e.entries)} compiled entr{'y' if len(e.entries) == 1 else 'ies'})",
                 style="bold"))
    for g in e.entries:
        c.print(Text(f" entry {g.entry}" + ("  (running now)" if g.current else ""), style="bold cyan"))
        for part in g.code_parts:
            c.print(Text("   " + part))
        for part in g.failed:
            c.print(Text("   fails now: " + part, style="red"))
    for reason in e.recompile_reasons:
        c.print(Text("recompiled because: " + reason, style="yellow"))
    if e.note:
        c.print(Text(e.note, style="dim"))


def _frames(c: Console, e: FramesShown) -> None:
    table = Table(box=None, show_header=False)
    for i, (title, file, line, index) in enumerate(e.frames):
        table.add_row("→" if i == e.current else " ", title, f"{os.path.basename(file)}:{line}", f"#{index}")
    c.print(table)


_HANDLERS = {BytecodeStopped: _stopped, BytecodeShown: _bytecode, SourceShown: _source,
             DecompiledShown: _decompiled, ValuesShown: _values, GuardsShown: _guards, FramesShown: _frames,
             FrameSelected: _frame_selected}
