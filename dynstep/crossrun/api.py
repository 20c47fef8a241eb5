"""`dynstep.compare(a, b)`: two recorded runs, from any two processes, aligned node by node.

    cmp = dynstep.compare("torch213.dynstep", "torch214.dynstep")          # paths, Recordings or sessions
    cmp.first_divergence            # Divergence(module="transformer.h.1.mlp.act", source="gpt2.py:66", ...)
    cmp.unmatched.b_only            # nodes only run B ran (a layer it added)
    dynstep.compare(run, run, steps=(10, 11))    # one run's step 10 against its step 11

Each run's hits are grouped into nodes by their stable identity (`Snapshot.identity`), the two
node lists are aligned (crossrun.align), and A's hits are walked in the order A ran them: the
first whose partner in B (the same step of the aligned node) differs beyond tolerance is the
first divergence. With tensors in both recordings values are compared, else statistics.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..core.errors import DynstepError
from ..core.records import Snapshot
from ..graph.identity import fill_identities
from . import align as al
from .result import Comparison, CurvePoint, Divergence, ModuleCurve, NodeRef, Side, Unmatched
from .values import Tolerance, differ

MAX_CURVES = 60
TensorOf = Callable[[Snapshot], Any]   # a hit's tensor (read lazily from a recording), or None


def compare(a: Any, b: Any, *, rtol: float | None = None, atol: float | None = None,
            steps: int | tuple[int, int] | None = None, ranks: tuple[int, int] | None = None) -> Comparison:
    """Compare run `a` with run `b` (recording paths, `Recording`s, sessions or lists of Snapshots).

    rtol/atol: the tolerance for every node (default: by dtype, crossrun.values.DEFAULTS); steps: only
    that step of every node (an int), or A's step against B's step (a pair), else every step both
    ran; ranks: which rank of each run (default rank 0 of a distributed recording)."""
    chosen = _steps(steps)
    if (rtol is not None and not rtol >= 0) or (atol is not None and not atol >= 0):
        raise DynstepError(f"dynstep compare: rtol and atol must be >= 0, got rtol={rtol!r}, atol={atol!r}")
    rank_a, rank_b = ranks if ranks is not None else (None, None)
    (name_a, hits_a, tensor_a, notes_a) = _run(a, "A", rank_a)
    (name_b, hits_b, tensor_b, notes_b) = _run(b, "B", rank_b)
    a_nodes, b_nodes = al.nodes_of(hits_a), al.nodes_of(hits_b)
    pairs, a_only, b_only = al.align(a_nodes, b_nodes)
    first, compared = _first(pairs, Tolerance(rtol, atol), chosen, tensor_a, tensor_b)
    counts = tuple((m, sum(p.match == m for p in pairs)) for m in al.MATCHES)
    notes = notes_a + notes_b
    if not compared:
        notes.append("no hit was compared: the runs share no node" if not pairs else
                     "no hit was compared: the aligned nodes did not run at the chosen steps")
    return Comparison(name_a, name_b, first, Unmatched(_refs(a_only), _refs(b_only)), counts, compared,
                      chosen, tuple(curves(pairs, first, chosen)), tuple(notes))


def _steps(steps: int | tuple[int, int] | None) -> tuple[int, int] | None:
    if steps is None:
        return None
    pair = (steps, steps) if isinstance(steps, int) else tuple(steps)
    if len(pair) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in pair):
        raise DynstepError(f"dynstep compare: steps must be a step number (>= 0) or a pair (A's step, B's step), "
                           f"got {steps!r}")
    return pair[0], pair[1]


def _run(run: Any, label: str, rank: int | None) -> tuple[str, list[Snapshot], TensorOf, list[str]]:
    """(a name, the hits of one rank with identities, how to read a hit's tensor, notes)."""
    notes: list[str] = []
    if isinstance(run, (str, os.PathLike)):
        from ..recording.reader import load

        name, run = str(run), load(run, tensors=False)
    else:
        name = str(getattr(run, "path", "") or f"run {label}")
    hits = list(run.all() if hasattr(run, "all") else run)
    if not all(isinstance(h, Snapshot) for h in hits):
        raise DynstepError(f"dynstep compare: run {label} is {type(run).__name__}; expected a recording path, a "
                           "Recording, a Session or a list of Snapshots")
    ranks = sorted({h.rank for h in hits})
    if rank is None and len(ranks) > 1:
        rank = ranks[0]
        notes.append(f"run {label} holds ranks {ranks}: rank {rank} compared (ranks=(A, B) to choose)")
    if rank is not None:
        if rank not in ranks:
            raise DynstepError(f"dynstep compare: run {label} has no rank {rank}; it holds ranks {ranks}")
        hits = [h for h in hits if h.rank == rank]
    tensor_of = getattr(run, "tensor_of", None) or (lambda h: h.tensor)
    return name, fill_identities(hits), tensor_of, notes


def _first(pairs: Sequence[al.Pair], tol: Tolerance, steps: tuple[int, int] | None, tensor_a: TensorOf,
           tensor_b: TensorOf) -> tuple[Divergence | None, int]:
    """The first hit of A (in the order A ran) that differs from its partner; and how many were compared."""
    walk = sorted(((hit.seq, i, p) for p in pairs for i, hit in enumerate(p.a.hits)
                   if steps is None or i == steps[0]), key=lambda t: t[0])
    compared = 0
    for _, i, pair in walk:
        j = i if steps is None else steps[1]
        if j >= len(pair.b.hits):
            continue
        x, y = pair.a.hits[i], pair.b.hits[j]
        d = differ(x, y, tol, tensor_a(x), tensor_b(y))
        compared += 1
        if d.differs:
            a, b = Side.of(x, i), Side.of(y, j)
            return Divergence(module=a.module, source=a.source, line_text=a.line_text, op=a.op, node=a.node,
                              kind=x.kind, a=a, b=b, match=pair.match, compared=d.compared, max_abs=d.max_abs,
                              max_rel=d.max_rel, stat=d.stat, rtol=d.rtol, atol=d.atol), compared
    return None, compared


def _refs(nodes: Sequence[al.RunNode]) -> tuple[NodeRef, ...]:
    return tuple(NodeRef(n.kind, n.first.node, n.first.target, n.first.module, n.first.source, n.first.source_text,
                         n.identity, len(n.hits)) for n in nodes)


def curves(pairs: Sequence[al.Pair], first: Divergence | None, steps: tuple[int, int] | None) -> list[ModuleCurve]:
    """Per module of A (the divergent one first): its values in both runs, over steps when several
    ran (the module's last aligned value node), else over its nodes."""
    by_module: dict[str, list[al.Pair]] = {}
    for p in pairs:
        if p.a.kind == "value":
            by_module.setdefault(p.a.parts.module, []).append(p)
    divergent = next((p.a.parts.module for p in pairs if first is not None and p.a.identity == first.a.identity), None)
    order = sorted(by_module, key=lambda m: m != divergent)   # stable: A's order after the divergent module
    out = []
    for module in order[:MAX_CURVES]:
        group = by_module[module]
        several = steps is None and max(min(len(p.a.hits), len(p.b.hits)) for p in group) > 1
        if several:
            last = group[-1]
            n = min(len(last.a.hits), len(last.b.hits))
            points = [_point(str(i), last.a.hits[i], last.b.hits[i]) for i in range(n)]
        else:
            i, j = steps or (0, 0)
            points = [_point(p.a.first.node, p.a.hits[i], p.b.hits[j]) for p in group
                      if i < len(p.a.hits) and j < len(p.b.hits)]
        out.append(ModuleCurve(module or "(top level)", "step" if several else "node", tuple(points)))
    return out


def _point(label: str, a: Snapshot, b: Snapshot) -> CurvePoint:
    return CurvePoint(label, float(a.stats.mean), float(a.stats.std), float(b.stats.mean), float(b.stats.std))
