"""Consoles for tables that stay readable wherever they are printed.

In a terminal rich fits a table to the terminal's width. Printed into a pipe or a CI log, rich
assumes 80 columns (or what COLUMNS says) and folds cells mid-word (`capture_scalar_outp` /
`uts`); there `table_console` is as wide as the widest row needs, and front ends with a plain
layout (one block per row, `dynstep run`'s graph breaks) use it when `plain(console)` is True.

    out = table_console(stderr=True)
    if plain(out): out.print("graph break at f.py:3: ...", markup=False)
    else: out.print(table)
"""

from __future__ import annotations

import sys
from typing import IO

from rich.console import Console

_UNBOUNDED = 100_000     # no table row is wider; rich sizes a table to its content, not to this


def table_console(*, stderr: bool = False, file: IO[str] | None = None, minimum: int = 0) -> Console:
    """A terminal's own width (at least `minimum`); elsewhere a width no row can reach."""
    out = file or (sys.stderr if stderr else sys.stdout)
    probe = Console(file=out)
    if probe.is_terminal:
        return Console(file=out, highlight=False, width=max(probe.width, minimum) if minimum else None)
    return Console(file=out, highlight=False, width=_UNBOUNDED)


def plain(console: Console) -> bool:
    """Whether `console` writes to something that is not a terminal (a plain layout reads better there)."""
    return not console.is_terminal
