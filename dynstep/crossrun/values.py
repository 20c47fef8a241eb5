"""Whether two recorded hits of one node hold the same value: tensors when both runs kept them,
else their statistics.

    tol = Tolerance(rtol=None, atol=None)            # per-dtype defaults (DEFAULTS)
    d = differ(a_hit, b_hit, tol)                    # HitDiff(differs=True, compared="values", ...)

Values: equal shapes and `|a - b| <= atol + rtol * |b|` everywhere (NaN equal to NaN), computed in
float64 whatever the two dtypes are (an fp32 run against a bf16 one). Statistics: the same test on
min, max, mean, std and absmax, and equal NaN and Inf counts.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..core.records import Snapshot

# (rtol, atol) by dtype when none is given: looser than torch.testing's float32 default, because two
# runs (another torch, another commit) legitimately reorder float arithmetic through whole layers
DEFAULTS = {"float64": (1e-7, 1e-7), "float32": (1e-4, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)}
STATS = ("mean", "std", "min", "max", "absmax")


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float | None = None
    atol: float | None = None

    def for_dtypes(self, *dtypes: str) -> tuple[float, float]:
        """The (rtol, atol) for two hits: given values, else the loosest default of their dtypes."""
        known = [DEFAULTS[d] for d in dtypes if d in DEFAULTS] or [DEFAULTS["float32"]]
        rtol = self.rtol if self.rtol is not None else max(r for r, _ in known)
        atol = self.atol if self.atol is not None else max(a for _, a in known)
        return rtol, atol


@dataclasses.dataclass(frozen=True)
class HitDiff:
    differs: bool
    compared: str          # "values" or "stats"
    max_abs: float         # largest |a - b| (values), or of the statistic that differs most (stats)
    max_rel: float
    stat: str = ""         # stats: the statistic that differs most ("shape", "nan", "inf" too)
    rtol: float = 0.0
    atol: float = 0.0


def differ(a: Snapshot, b: Snapshot, tol: Tolerance, a_tensor: torch.Tensor | None = None,
           b_tensor: torch.Tensor | None = None) -> HitDiff:
    """Compare one hit of A with its partner in B (tensors given here, or the hits' own)."""
    rtol, atol = tol.for_dtypes(a.dtype, b.dtype)
    if tuple(a.shape) != tuple(b.shape):
        return HitDiff(True, "stats", math.inf, math.inf, "shape", rtol, atol)
    x = a_tensor if a_tensor is not None else a.tensor
    y = b_tensor if b_tensor is not None else b.tensor
    if x is not None and y is not None and tuple(x.shape) == tuple(y.shape):
        return _values(x, y, rtol, atol)
    return _stats(a, b, rtol, atol)


def _values(x: torch.Tensor, y: torch.Tensor, rtol: float, atol: float) -> HitDiff:
    x, y = x.detach().cpu().double(), y.detach().cpu().double()
    if not x.numel():
        return HitDiff(False, "values", 0.0, 0.0, "", rtol, atol)
    close = torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
    delta = (x - y).abs()
    finite = torch.isfinite(delta)
    max_abs = float(delta[finite].max()) if bool(finite.any()) else 0.0
    rel = delta[finite] / y.abs()[finite].clamp_min(1e-12)
    max_rel = float(rel.max()) if rel.numel() else 0.0
    if bool((~finite & ~close).any()):   # a NaN or Inf on one side only
        max_abs = max_rel = math.inf
    return HitDiff(not bool(close.all()), "values", max_abs, max_rel, "", rtol, atol)


def _stats(a: Snapshot, b: Snapshot, rtol: float, atol: float) -> HitDiff:
    for count in ("nan", "inf"):
        if a.stats[count] != b.stats[count]:
            return HitDiff(True, "stats", math.inf, math.inf, count, rtol, atol)
    worst, worst_excess, worst_abs, worst_rel = "", 0.0, 0.0, 0.0
    for name in STATS:
        p, q = float(a.stats[name]), float(b.stats[name])
        if math.isnan(p) and math.isnan(q):
            continue
        delta = abs(p - q) if math.isfinite(p) and math.isfinite(q) else (0.0 if p == q else math.inf)
        allowed = atol + rtol * abs(q)
        excess = delta / allowed if allowed > 0 else (math.inf if delta else 0.0)
        if excess > worst_excess or (not worst and delta):
            worst, worst_excess = name, excess
            worst_abs, worst_rel = delta, delta / max(abs(q), 1e-12)
    return HitDiff(worst_excess > 1.0, "stats", worst_abs, worst_rel, worst, rtol, atol)
