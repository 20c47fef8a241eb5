"""Terminal front end: the only engine-facing module that imports rich and prints.

    console.default_sink(ProbePrinted(snap))      # one line per hit, on stderr
    console.print_table(snapshots, title="...")   # a table of probe hits
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from .records import Snapshot, Stats

_err = Console(stderr=True, highlight=False, soft_wrap=True)
_out = Console(highlight=False)


def fmt(v: float | int) -> str:
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "nan"
    if v == 0 or 1e-3 <= abs(v) < 1e4:
        return f"{v:.4g}"
    return f"{v:.3e}"


def stats_line(stats: Stats) -> str:
    return (f"min {fmt(stats.min)}  max {fmt(stats.max)}  mean {fmt(stats.mean)}  std {fmt(stats.std)}  "
            f"absmax {fmt(stats.absmax)}  nan {stats.nan}  inf {stats.inf}")


def tensor_line(snap: Snapshot) -> str:
    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
             "int32": "i32", "bool": "b8"}.get(snap.dtype, snap.dtype)
    return f"{short}{list(snap.shape)} {snap.device}  {stats_line(snap.stats)}"


def default_sink(event: object) -> None:
    from .events import ProbePrinted, Warning_

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
    console = Console(file=file or sys.stdout, highlight=False, width=max(_out.width, 140))
    console.print(snapshots_table(snaps, title))
