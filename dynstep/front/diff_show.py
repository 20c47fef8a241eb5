"""Terminal front end of the diff (the only diff module that imports rich and prints).

    report.show()                          # a table per graph call, the first divergence marked
    with progress_bar() as progress:       # a live bar fed by the engine's progress callback
        dynstep.diff(model, x, progress=progress)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..eagerdiff.report import DiffReport, GraphDiff, NanOrigin, NodeDiff, RootCause


def _f(v: float) -> str:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    return f"{v:.3g}"


def node_table(g: GraphDiff) -> Table:
    table = Table(title=f"{g.graph} call {g.call} · backend {g.backend} · {g.compiles} compile(s), "
                        f"{g.seconds:.1f}s", title_justify="left")
    for col in ("#", "node", "module", "source", "error", "eager err", "ratio", "max abs", "cos", ""):
        table.add_column(col, no_wrap=col in ("#", "node", "source", ""))
    first = g.first_divergence.node if g.first_divergence else None
    for d in (*g.nodes, *g.grads):
        table.add_row(*_row(d), style="bold red" if d.node == first and d.kind != "grad" else
                      ("red" if d.diverged else None))
    return table


def _row(d: NodeDiff) -> list[str]:
    verdict = "DIVERGES" if d.diverged else "ok"
    if d.diverged and d.verdict and d.verdict != "compiled worse":
        verdict += f" ({d.verdict})"
    if d.own is True:
        verdict += " (own)"
    if d.kind != "value":
        verdict += f" [{d.kind}]"
    return [str(d.order), d.node, d.module or "-", d.source or "-", _f(d.error), _f(d.ref_error),
            _f(d.ratio), _f(d.max_abs), f"{d.cosine:.4f}", verdict]


def _root_cause(c: RootCause) -> str:
    tried = ", ".join(f"{a.name}{' (fixed)' if a.fixed else ''}" for a in c.ablations)
    return (f"[bold]root cause[/]: {c.sentence}\n    {c.compiles} compile(s) of a {c.subgraph_nodes}-node subgraph in "
            f"{c.seconds:.1f}s; tried: {tried}")


def _nan_line(o: NanOrigin) -> str:
    mod = f" in {o.module}" if o.module else ""
    return (f"first non-finite value ({o.run}): {o.node} ({o.target}){mod} at {o.source} "
            f"`{o.source_text}`  nan={o.nan} inf={o.inf}")


def show(report: DiffReport, console: Console | None = None) -> None:
    console = console or _wide_console()
    for g in report.graphs:
        console.print(node_table(g))
        if g.first_divergence is not None:
            d = g.first_divergence
            verdict = f"\n    verdict against float64: {d.verdict}" if d.verdict else ""
            console.print(f"[bold red]first divergence[/]: {d.where}\n    {d.source_text}{verdict}")
        if g.root_cause is not None:
            console.print(_root_cause(g.root_cause))
        for o in (g.nan_eager, g.nan_compiled):
            if o is not None:
                console.print(_nan_line(o))
        if g.grad_divergence is not None:
            console.print(f"[red]first divergent gradient belongs to[/]: {g.grad_divergence.where}")
        if g.ladder:
            rungs = " -> ".join(f"{s.backend}:{'DIVERGES' if s.diverged else 'ok'}" for s in g.ladder)
            console.print(f"backends ladder: eager:ok -> {rungs}")
        for note in g.notes:
            console.print(f"[yellow]note[/]: {note}")
        if g.repro:
            console.print(f"repro: python {g.repro}")
    console.print(report.summary(), style="green" if report.ok else "bold red")


class _Bar:
    """The callback the engine ticks: shows the bar while a graph is diffed; `done()` takes it off the
    screen until the next tick (the program may print, or show its own bar, in between)."""

    def __init__(self, bar: Progress) -> None:
        self.bar, self.task = bar, bar.add_task("", total=1)

    def __call__(self, what: str, step: int, total: int) -> None:
        if not self.bar.live.is_started:
            self.bar.start()
        self.bar.update(self.task, description=what, completed=step, total=total)

    def done(self) -> None:
        if self.bar.live.is_started:
            self.bar.stop()


@contextlib.contextmanager
def progress_bar(console: Console | None = None) -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar, and the callback to hand to `dynstep.diff(progress=...)`."""
    bar = _Bar(Progress(TextColumn("[bold]diff[/]"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                        TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console or Console(stderr=True), transient=True))
    try:
        yield bar
    finally:
        bar.done()


def print_any(value: Any, console: Console | None = None) -> None:
    (console or _wide_console()).print(value)


def _wide_console() -> Console:
    """Tables stay readable when stdout is a pipe or a CI log (rich assumes 80 columns there)."""
    probe = Console(highlight=False)
    return Console(highlight=False, width=max(probe.width, 150))
