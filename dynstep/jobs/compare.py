"""Compare the ranks of a distributed job's recording: for a value every rank should hold alike (a
replicated activation, a parameter's gradient after all-reduce), the first rank that differs from
rank 0.

    compare_ranks(dynstep.load("run.dynstep").all(), selector_filter)
      -> [RankDifference(node="x_3", graph=..., call=0, kind="value", rank=1, max_abs=0.5), ...]

Hits are matched by (kind, graph, node, call); with tensors the comparison is `torch.allclose`, without
them (stats-only recordings) the stats min/max/mean are compared with the same tolerance.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..core.records import Snapshot


@dataclasses.dataclass(frozen=True)
class RankDifference:
    kind: str
    graph: str
    node: str
    module: str
    source: str
    call: int
    rank: int          # the first rank (in rank order) whose value differs from rank 0's
    max_abs: float     # the largest absolute difference (nan when only stats were recorded)


def compare_ranks(snaps: list[Snapshot], *, rtol: float = 1e-5, atol: float = 1e-6) -> list[RankDifference]:
    """Every hit whose value on some rank differs from rank 0's, in rank 0's hit order."""
    by_key: dict[tuple, dict[int, Snapshot]] = {}
    for s in snaps:
        by_key.setdefault((s.kind, s.graph, s.node, s.call), {})[s.rank] = s
    out = []
    for key, ranks in by_key.items():
        base = ranks.get(0)
        if base is None:
            continue
        for rank in sorted(r for r in ranks if r != 0):
            differs, max_abs = _differs(base, ranks[rank], rtol, atol)
            if differs:
                out.append(RankDifference(base.kind, base.graph, base.node, base.module, base.source, base.call,
                                          rank, max_abs))
                break
    return sorted(out, key=lambda d: next(s.seq for s in snaps if s.rank == 0 and
                                          (s.kind, s.graph, s.node, s.call) == (d.kind, d.graph, d.node, d.call)))


def _differs(a: Snapshot, b: Snapshot, rtol: float, atol: float) -> tuple[bool, float]:
    if a.shape != b.shape:
        return True, math.inf
    if a.tensor is not None and b.tensor is not None:
        x, y = a.tensor.double(), b.tensor.double()
        max_abs = float((x - y).abs().max()) if x.numel() else 0.0
        return not torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True), max_abs
    pairs = [(a.stats[k], b.stats[k]) for k in ("min", "max", "mean")]
    differs = any(not math.isclose(p, q, rel_tol=rtol, abs_tol=atol) for p, q in pairs
                  if not (math.isnan(p) and math.isnan(q)))
    return differs, math.nan
