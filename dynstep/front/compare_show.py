"""Terminal view of a `Comparison` (`dynstep compare`, `Comparison.show()`): the only compare module
that imports rich and prints.

    cmp.show()     # the first divergence with both runs' side, then what did not align
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from ..crossrun.result import Comparison, Divergence, NodeRef

MAX_UNMATCHED = 20


def _f(v: float) -> str:
    return str(v) if isinstance(v, float) and not math.isfinite(v) else f"{v:.4g}"


def divergence_table(d: Divergence, a: str, b: str) -> Table:
    table = Table(title=f"first divergence: {d.kind} of {d.node}, matched {d.match}, compared {d.compared} "
                        f"(rtol {d.rtol:g}, atol {d.atol:g})", title_justify="left")
    table.add_column("")
    table.add_column(f"A  {a}", overflow="fold")
    table.add_column(f"B  {b}", overflow="fold")
    rows = [("module", d.a.module or "-", d.b.module or "-"), ("source", d.a.source or "-", d.b.source or "-"),
            ("line", d.a.line_text, d.b.line_text), ("op", d.a.op, d.b.op), ("node", d.a.node, d.b.node),
            ("step", str(d.a.step), str(d.b.step)), ("shape", str(list(d.a.shape)), str(list(d.b.shape))),
            ("dtype", d.a.dtype, d.b.dtype)]
    rows += [(k, _f(d.a.stats[k]), _f(d.b.stats[k])) for k in ("mean", "std", "min", "max", "absmax", "nan", "inf")]
    for name, x, y in rows:
        table.add_row(name, x, y, style="bold red" if name == d.stat else None)
    return table


def _unmatched(title: str, refs: tuple[NodeRef, ...]) -> Table:
    table = Table(title=f"{title}: {len(refs)} node(s)", title_justify="left")
    for col in ("kind", "node", "op", "module", "source", "line"):
        table.add_column(col, overflow="fold")
    for r in refs[:MAX_UNMATCHED]:
        table.add_row(r.kind, r.node, r.op, r.module or "-", r.source or "-", r.line_text)
    if len(refs) > MAX_UNMATCHED:
        table.add_row("...", f"{len(refs) - MAX_UNMATCHED} more (--json lists them all)", "", "", "", "")
    return table


def show(cmp: Comparison, console: Any = None) -> None:
    console = console or Console(highlight=False, width=max(Console().width, 140))
    aligned = ", ".join(f"{n} {m}" for m, n in cmp.aligned if n)
    console.print(f"A: {cmp.a}\nB: {cmp.b}\naligned nodes: {aligned or 'none'}; hits compared: {cmp.compared}"
                  + (f"; steps A {cmp.steps[0]} vs B {cmp.steps[1]}" if cmp.steps else ""))
    if cmp.first_divergence is not None:
        d = cmp.first_divergence
        console.print(divergence_table(d, cmp.a, cmp.b))
        how = f"max |a-b| {_f(d.max_abs)}, max rel {_f(d.max_rel)}" if d.compared == "values" else \
            f"{d.stat} differs most"
        console.print(f"[bold red]first divergence[/]: {d.where}\n    {d.line_text}\n    {how}")
    for title, refs in (("only in A", cmp.unmatched.a_only), ("only in B", cmp.unmatched.b_only)):
        if refs:
            console.print(_unmatched(title, refs))
    for note in cmp.notes:
        console.print(f"[yellow]note[/]: {note}")
    console.print(cmp.summary(), style="green" if cmp.ok else "bold red")
