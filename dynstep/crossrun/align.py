"""Lining up the nodes of two runs by their stable identity (dynstep.graph.identity).

A run's *nodes* are its distinct (kind, IR level, identity) triples, in the order each first ran (the
level tells a probe on AOTAutograd's aten graph, `op:aten.mm`, from one on Dynamo's graph at the same
line and module); a node's hits are the times it ran (its steps). Two runs are aligned in three passes, each on what the previous
left unmatched:

1. exact: the same identity (module, op, file, line text, occurrence);
2. module + op: the same module path and op, paired in the order they ran (an edited line);
3. module: the same module path, paired in order (the module now computes something else).

What is left is present in one run only (`a_only`, `b_only`).

    a_nodes, b_nodes = nodes_of(a_hits), nodes_of(b_hits)
    pairs, a_only, b_only = align(a_nodes, b_nodes)     # Pair(a=RunNode, b=RunNode, match="exact")
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence

from ..core.records import Snapshot
from ..graph.identity import NodeIdentity, of_fields

MATCHES = ("exact", "module+op", "module")


@dataclasses.dataclass(frozen=True)
class RunNode:
    """One node of a run: its identity and every hit it produced, in the order they ran."""

    kind: str
    level: str                # "aten" for a hit on AOTAutograd's graph, "" on Dynamo's
    identity: str
    parts: NodeIdentity
    hits: tuple[Snapshot, ...]

    @property
    def first(self) -> Snapshot:
        return self.hits[0]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.level, self.identity)


@dataclasses.dataclass(frozen=True)
class Pair:
    a: RunNode
    b: RunNode
    match: str             # one of MATCHES


def _parts(s: Snapshot) -> NodeIdentity:
    try:
        return NodeIdentity.parse(s.identity)
    except ValueError:   # an identity this dynstep cannot read: what the hit states still aligns it
        return of_fields(s.module, s.target, s.source, s.source_text)


def level(s: Snapshot) -> str:
    return "aten" if s.target.startswith(("aten.", "prims.")) else ""


def nodes_of(hits: Sequence[Snapshot]) -> list[RunNode]:
    """The run's nodes in the order each first ran (hits in `seq` order)."""
    grouped: dict[tuple[str, str, str], list[Snapshot]] = {}
    for s in sorted(hits, key=lambda h: h.seq):
        grouped.setdefault((s.kind, level(s), s.identity), []).append(s)
    return [RunNode(kind, lvl, identity, _parts(group[0]), tuple(group))
            for (kind, lvl, identity), group in grouped.items()]


def align(a_nodes: Sequence[RunNode], b_nodes: Sequence[RunNode]) -> tuple[list[Pair], list[RunNode], list[RunNode]]:
    """(pairs in A's order, A's nodes without a partner, B's nodes without a partner)."""
    b_exact = {n.key: n for n in b_nodes}
    pairs: list[Pair] = []
    left_a: list[RunNode] = []
    for n in a_nodes:
        partner = b_exact.pop(n.key, None)
        if partner is not None:
            pairs.append(Pair(n, partner, "exact"))
        else:
            left_a.append(n)
    left_b = [n for n in b_nodes if n.key in b_exact]
    fuzzy: tuple[tuple[str, Callable[[RunNode], tuple]], ...] = (
        ("module+op", lambda n: (n.kind, n.parts.module, n.parts.op, n.parts.output)),
        ("module", lambda n: (n.kind, n.parts.module)))
    for match, key in fuzzy:
        left_a, left_b = _pair_in_order(left_a, left_b, key, match, pairs)
    order = {n.key: i for i, n in enumerate(a_nodes)}
    pairs.sort(key=lambda p: order[p.a.key])
    return pairs, left_a, left_b


def _pair_in_order(left_a: list[RunNode], left_b: list[RunNode], key: Callable[[RunNode], tuple], match: str,
                   pairs: list[Pair]) -> tuple[list[RunNode], list[RunNode]]:
    queues: dict[tuple, collections.deque[RunNode]] = collections.defaultdict(collections.deque)
    for n in left_b:
        queues[key(n)].append(n)
    taken: set[tuple[str, str, str]] = set()
    still_a = []
    for n in left_a:
        queue = queues.get(key(n))
        if queue:
            partner = queue.popleft()
            taken.add(partner.key)
            pairs.append(Pair(n, partner, match))
        else:
            still_a.append(n)
    return still_a, [n for n in left_b if n.key not in taken]
