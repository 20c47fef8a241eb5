"""The distribution of one recorded tensor, for the report: counts of its finite elements in equal
bins between their min and max, and how many are NaN, +Inf, -Inf.

    h = histogram(tensor, kind="value", call=3, seq=17)     # None for an empty tensor
    h.edges (bins + 1 floats), h.counts (bins ints), h.nan, h.posinf, h.neginf, h.numel

A panel of the report shows the hit that matters most: the first with a NaN/Inf, else the last one.
Computed in float64 on the CPU from the recorded copy (never from a live tensor).
"""

from __future__ import annotations

import dataclasses

import torch

BINS = 30


@dataclasses.dataclass(frozen=True)
class Histogram:
    kind: str                 # "value" or "grad"
    call: int
    seq: int
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    numel: int
    nan: int
    posinf: int
    neginf: int

    @property
    def finite(self) -> int:
        return self.numel - self.nan - self.posinf - self.neginf


def histogram(tensor: torch.Tensor, *, kind: str, call: int, seq: int, bins: int = BINS) -> Histogram | None:
    if tensor.numel() == 0:
        return None
    t = tensor.detach().to("cpu")
    if t.is_complex():
        t = t.abs()
    t = t.to(torch.float64).flatten()
    nan, posinf, neginf = int(t.isnan().sum()), int(t.isposinf().sum()), int(t.isneginf().sum())
    finite = t[t.isfinite()]
    if finite.numel() == 0:
        return Histogram(kind, call, seq, (), (), t.numel(), nan, posinf, neginf)
    lo, hi = float(finite.min()), float(finite.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = torch.histogram(finite, bins=bins, range=(lo, hi))
    return Histogram(kind, call, seq, tuple(float(e) for e in edges), tuple(int(c) for c in counts),
                     t.numel(), nan, posinf, neginf)
