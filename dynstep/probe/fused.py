"""Summary statistics that Inductor's kernels computed: the few numbers per probed value, turned into
the `Stats` of one hit per site, exactly as the probe kernels summarise a tensor they are handed.

A fused summary probe (backends/stats_pass.py) hands no tensor to dynstep: the compiled kernels
reduce the value where they compute it, and `dynstep::publish(stats, sites, shapes, ranks, dtypes)`
carries only the results. Per site, in `sites` order, `stats` holds

    sum, sumsq   float64 sums of the finite values and of their squares
    min, max     of the finite values, in the value's dtype (+inf / -inf when there is none)
    nan, bad     NaN count and non-finite count (floating dtypes only; int32 or int64)

and this module folds them as `Acc::finish` in csrc/probe_state.h does (shift 0): mean = sum/n,
std = sqrt((sumsq - n mean^2) / (n - 1)), absmax = max(|min|, |max|), all over the n finite values.
The native kernel (csrc/probe_publish.cpp) does the same into the site's ring; this is its Python
kernel (no native build) and the callback for hits that must reach Python at once.

    fused.stats_of_parts([s, q, lo, hi, n_nan, n_bad], numel=1024, floating=True) -> Stats
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..core.records import Stats
from ..core.sites import SITES
from . import runtime

# c10::ScalarType codes of the dtypes a probe summarises (csrc/probe_state.h: dtype_name)
DTYPE_CODES = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
               torch.float32: 6, torch.float64: 7, torch.bool: 11, torch.bfloat16: 15}
DTYPE_NAMES = {code: str(dtype).replace("torch.", "") for dtype, code in DTYPE_CODES.items()}
FLOATING = frozenset(DTYPE_CODES[d] for d in (torch.float16, torch.float32, torch.float64, torch.bfloat16))


def parts_per_site(dtype_code: int) -> int:
    """How many statistics tensors `publish` carries for a value of this dtype."""
    return 6 if dtype_code in FLOATING else 4


def stats_of_parts(parts: Sequence[float], numel: int, *, floating: bool) -> Stats:
    """`Stats` from (sum, sumsq, min, max[, nan, bad]) over a value of `numel` elements."""
    total, squares, lo, hi = (float(p) for p in parts[:4])
    nan, bad = (int(parts[4]), int(parts[5])) if floating else (0, 0)
    count = numel - bad
    if count <= 0:
        return Stats(nan=nan, inf=bad - nan, count=0)
    mean_d = total / count
    std = math.nan
    if count > 1:
        var = (squares - count * mean_d * mean_d) / (count - 1)
        std = math.sqrt(var if var > 0.0 else 0.0)
    return Stats(min=lo, max=hi, mean=mean_d, std=std, absmax=max(abs(lo), abs(hi)), nan=nan, inf=bad - nan,
                 count=count)


def split_shapes(shapes: Sequence[int], ranks: Sequence[int]) -> list[tuple[int, ...]]:
    out, at = [], 0
    for rank in ranks:
        out.append(tuple(int(s) for s in shapes[at:at + rank]))
        at += rank
    return out


def on_publish(stats: list[torch.Tensor], sites: list[int], shapes: list[int], ranks: list[int],
               dtypes: list[int]) -> None:
    """The Python kernel of dynstep::publish: one hit per site, in order (one sync for all)."""
    numbers = torch.stack([s.detach().to(torch.float64).reshape(()) for s in stats]).tolist() if stats else []
    device = str(stats[0].device) if stats else "cpu"
    at = 0
    for site_id, shape, code in zip(sites, split_shapes(shapes, ranks), dtypes):
        width = parts_per_site(code)
        parts, at = numbers[at:at + width], at + width
        if runtime.is_closed(site_id):
            continue
        numel = math.prod(shape)
        stats_ = stats_of_parts(parts, numel, floating=code in FLOATING)
        runtime.hit_without_tensor(SITES.get(site_id), runtime.next_call(site_id), shape, DTYPE_NAMES[code],
                                   device, stats_)


def published(site_id: int, call: int, numbers: tuple, shape: tuple[int, ...], dtype_code: int,
              device: str) -> None:
    """A native publish hit that must reach Python now (a streaming session): stats already folded."""
    runtime.hit_without_tensor(SITES.get(site_id), call, tuple(shape), DTYPE_NAMES.get(dtype_code, "unsupported"),
                               device, Stats(*numbers))
