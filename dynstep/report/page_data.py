"""The numbers a report's page draws and lists, as plain data (the page itself is a front end,
`dynstep.front.report_html`, drawing with `dynstep.front.report_charts`).

A series is reduced to at most `MAX_POINTS` buckets (each keeps its extremes and sums its NaN/Inf
counts), so a page stays light however long the run was; the tooltip's copy of those points has
JSON's null where a value is not finite. The hits table is rows of `HIT_COLUMNS`, statistics to six
significant digits.

    pts = reduced(series)          -> {"call": [...], "min": [...], ..., "nan": [...], "inf": [...]}
    tooltip_points(pts)            -> the same, None for NaN and Inf
    hits_table(report)             -> {"cols": [...], "rows": [[...], ...], "first": seq or None}
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .model import RunReport, Series

MAX_POINTS = 400
HIT_COLUMNS = ("#", "call", "kind", "graph", "node", "op", "module", "source", "shape", "dtype", "device",
               "min", "max", "mean", "std", "absmax", "nan", "inf", "src")


def reduced(series: Series, limit: int = MAX_POINTS) -> dict[str, list]:
    """The series as lists, reduced to at most `limit` buckets."""
    n = len(series.calls)
    size = max(1, math.ceil(n / limit))
    out: dict[str, list] = {k: [] for k in ("call", "min", "max", "mean", "std", "absmax", "nan", "inf")}
    for start in range(0, n, size):
        part = slice(start, start + size)
        out["call"].append(series.calls[start])
        out["min"].append(_agg(min, series.min[part]))
        out["max"].append(_agg(max, series.max[part]))
        out["absmax"].append(_agg(max, series.absmax[part]))
        out["mean"].append(_agg(_avg, series.mean[part]))
        out["std"].append(_agg(_avg, series.std[part]))
        out["nan"].append(sum(series.nan[part]))
        out["inf"].append(sum(series.inf[part]))
    return out


def finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _agg(fn, values: Sequence[float]) -> float:
    kept = finite(values)
    return fn(kept) if kept else math.nan


def _avg(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def tooltip_points(pts: dict[str, list]) -> dict[str, list]:
    """Reduced points as the page's script reads them: None (null) where a value is NaN or Inf."""
    return {k: [None if isinstance(v, float) and not math.isfinite(v) else v for v in vs] for k, vs in pts.items()}


def hits_table(report: RunReport) -> dict[str, Any]:
    """Every hit as a row of `HIT_COLUMNS`, and the order (`seq`) of the first non-finite one."""
    rows = []
    for s in report.hits:
        st = s.stats
        rows.append([s.seq, s.call, s.kind, s.graph, s.node, s.target.rsplit(".", 1)[-1], s.module, s.source,
                     "x".join(map(str, s.shape)) or "scalar", s.dtype, s.device,
                     *(_num(st[k]) for k in ("min", "max", "mean", "std", "absmax")), st.nan, st.inf,
                     report.source_key(s.source)])
    first = report.first_nonfinite.seq if report.first_nonfinite is not None else None
    return {"cols": list(HIT_COLUMNS), "rows": rows, "first": first}


def _num(v: float) -> float | None:
    return float(f"{v:.6g}") if math.isfinite(v) else None
