"""Terminal front end: probe hits and warnings on stderr, tables of snapshots (rich).

    console.default_sink(ProbePrinted(snap))      # one line per hit, on stderr
    console.print_table(snapshots, title="...")   # a table of probe hits
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence

from rich.console import Console
from rich.table import Table

from ..core.events import ProbePrinted, Warning_
from ..core.records import Snapshot
from .tables import table_console
from .text import fmt, tensor_line

_err = Console(stderr=True, highlight=False, soft_wrap=True)


def default_sink(event: object) -> None:
    if isinstance(event, ProbePrinted):
        s = event.snapshot
        where = f"{s.module} " if s.module else ""
        label = "grad " if s.kind == "grad" else ""
        _err.print(f"[bold cyan]dynstep[/] {label}{s.node} [dim]{s.target}[/] {where}[dim]{s.source}[/] "
                   f"#{s.call}  {tensor_line(s)}", markup=True)
        if event.values:
            more = " ..." if len(event.values) < max(s.stats.count + s.stats.nan + s.stats.inf, 0) else ""
            _err.print("    [" + ", ".join(f"{v:.6g}" for v in event.values) + more + "]", markup=False)
    elif isinstance(event, Warning_):
        _err.print(f"[yellow]dynstep:[/] {event.message}")
    else:
        from .repl import render   # stepper events: stops, command answers

        render(event)


def use_console(console: Console) -> None:
    """Probe lines and warnings on another console (a distributed job's rank: the launcher's terminal)."""
    global _err
    _err = console


def snapshots_table(snaps: Sequence[Snapshot], title: str = "probe hits") -> Table:
    table = Table(title=title, show_lines=False, header_style="bold")
    for col, just in (("kind", "left"), ("module", "left"), ("node", "left"), ("op", "left"),
                      ("source", "left"), ("shape", "left"), ("mean", "right"), ("std", "right"),
                      ("absmax", "right"), ("nan/inf", "right")):
        table.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
    for s in snaps:
        bad = s.stats.nan + s.stats.inf
        table.add_row(s.kind, s.module or "-", s.node, s.target.rsplit(".", 1)[-1], s.source,
                      "x".join(map(str, s.shape)) or "scalar", fmt(s.stats.mean), fmt(s.stats.std),
                      fmt(s.stats.absmax), f"[red]{bad}[/]" if bad else "0")
    return table


def print_table(snaps: Sequence[Snapshot], title: str = "probe hits", file=None) -> None:
    console = table_console(file=file, minimum=140)   # a pipe or CI log: no cell folded mid-word
    console.print(snapshots_table(snaps, title))


@contextlib.contextmanager
def phases(label: str) -> Iterator[Callable[[str], None]]:
    """Say what a long command is doing, on stderr: a spinner on a terminal, else one line per phase;
    each finished phase is shown with its time."""
    state: dict[str, object] = {"text": "", "start": 0.0}
    with contextlib.ExitStack() as stack:
        status = stack.enter_context(_err.status("", spinner="dots")) if _err.is_terminal else None

        def finish() -> None:
            if state["text"]:
                _err.print(f"[green]✓[/] {state['text']} [dim]({time.monotonic() - float(state['start']):.1f} s)[/]")

        def on_phase(text: str) -> None:
            finish()
            state.update(text=text, start=time.monotonic())
            if status is not None:
                status.update(f"{label}: {text}")
            else:
                _err.print(f"{label}: {text} ...")

        yield on_phase
        finish()
