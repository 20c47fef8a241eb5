"""Plain text of the engine's events, for DAP `output` events and command answers in a debug console.

    event_text(Evaluated("value.shape", "torch.Size([2, 3])", None))   -> 'value.shape = torch.Size([2, 3])'
    event_text(Stopped(...))                                            -> None (DAP has its own stopped event)
"""

from __future__ import annotations

from ..bytecode.events import BytecodeStopped
from ..core.events import (CommandFailed, CompileViewShown, Evaluated, GraphShown, HelpShown, Info, ProbePrinted,
                           Resumed, Stopped, Warning_, WhereShown)


def event_text(event: object) -> str | None:
    """One event as text (no trailing newline), or None for events a DAP client gets otherwise."""
    if isinstance(event, (Stopped, Resumed, BytecodeStopped)):
        return None   # the client gets a `stopped` event
    if isinstance(event, ProbePrinted):
        s = event.snapshot
        st = s.stats
        values = (" [" + ", ".join(f"{v:.6g}" for v in event.values) + "]") if event.values else ""
        return (f"dynstep {'grad ' if s.kind == 'grad' else ''}{s.node} {s.target} {s.module} {s.source} #{s.call}  "
                f"{s.dtype}{list(s.shape)} min {st.min:.4g} max {st.max:.4g} mean {st.mean:.4g} "
                f"absmax {st.absmax:.4g} nan {st.nan} inf {st.inf}{values}")
    if isinstance(event, Warning_):
        return f"dynstep: {event.message}"
    if isinstance(event, Info):
        return event.message
    if isinstance(event, CommandFailed):
        return f"error: {event.command}: {event.message}"
    if isinstance(event, Evaluated):
        return f"{event.expr} = {event.text}"
    if isinstance(event, GraphShown):
        return "\n".join(f"{'→' if r.node == event.current else ' '} {r.node} = {r.target}  # {r.module or '-'} "
                         f"{r.source}" for r in event.rows)
    if isinstance(event, WhereShown):
        lines = [f"node {event.node} · {event.target} · module {event.module or '<top>'}", event.file]
        lines += [f"{'→' if n == event.line else ' '} {n:5d}  {text}" for n, text in event.lines]
        return "\n".join(lines + [f"  called from {f}" for f in event.stack])
    if isinstance(event, HelpShown):
        return "\n".join(f"{name:<22} {doc}" for name, doc in event.entries)
    if isinstance(event, CompileViewShown):
        return "\n".join([event.view.title, *("   " + line for line in event.view.lines)])
    return repr(event)
