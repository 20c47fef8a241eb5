"""Terminal rendering of `code [stage]` (a `StageShown` from `dynstep.stages.view`), on the REPL's console.

    ── Inductor's output code (forward) · compile 0/0 · lines 72-96 of 109 (code inductor all)
       /tmp/torchinductor/.../cabc.py
      79 →    cpp_fused_sin_0(primals_1, buf0)        # sin · model.py:7  y = torch.sin(x) @ w
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ..stages.stage import StageShown


def render(event: object, c: Console) -> bool:
    """Show a stage; False when the event is not one."""
    if not isinstance(event, StageShown):
        return False
    c.print(Text(f"── {event.title}" + (f" · {event.note}" if event.note else ""), style="bold magenta"))
    if event.path:
        c.print(Text(f"   {event.path}", style="dim"))
    notes = dict(event.notes)
    marked = set(event.marked)
    width = len(str(event.lines[-1][0])) if event.lines else 1
    for number, text in event.lines:
        here = number in marked
        line = Text(f"{number:>{width}} {'→' if here else ' '} ", style="bold" if here else "dim")
        line.append(text, style="bold reverse" if here else "")
        if number in notes:
            line.append(f"    # {notes[number]}", style="cyan")
        c.print(line, soft_wrap=True)    # a code line is never folded or cut
    if not marked:
        c.print(Text("   (no line of this stage stands for where the program is stopped)", style="dim"))
    c.print(Text(f"   stages of this compile: {', '.join(event.available)}", style="dim"))
    return True
