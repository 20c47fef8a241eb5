"""Plain-text formatting shared by the terminal front ends: numbers, stats, tensor one-liners.

    fmt(0.000123)            '1.230e-04'
    stats_line(stats)        'min -1  max 2  mean 0.1 ...'
"""

from __future__ import annotations

import math

from ..core.events import TensorView
from ..core.records import Snapshot, Stats

SHORT_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
                "int32": "i32", "bool": "b8"}


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
    short = SHORT_DTYPES.get(snap.dtype, snap.dtype)
    return f"{short}{list(snap.shape)} {snap.device}  {stats_line(snap.stats)}"


def tensor_text(t: TensorView) -> str:
    short = SHORT_DTYPES.get(t.dtype, t.dtype)
    stats = stats_line(t.stats) if t.stats is not None else "empty"
    sample = ", ".join(fmt(v) for v in t.sample)
    return f"{short}{list(t.shape)} {t.device}  {stats}\n   values [{sample}{', ...' if t.sample else ''}]"
