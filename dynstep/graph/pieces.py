"""Pieces of a Dynamo graph: what a backend sees when Dynamo's DDPOptimizer splits a graph at DDP's
gradient-bucket boundaries and compiles each piece on its own.

Selectors name values of the program (what a module returns, the last value of a source line), and a
piece alone cannot tell: a module call may straddle two pieces, and a piece's outputs feed the next
piece, not the caller. Each piece's node is linked to its node in Dynamo's whole graph (split_module
copies node meta, so both share the same fake value), selectors run on the whole graph, and each
piece places what falls inside it. A piece's graph id names it like DDPOptimizer does
(`forward/submod_1[4/0]`), so nodes of equal names in two pieces stay apart.

    index = link(gm)              # None: gm is Dynamo's whole graph
    whole = whole_of(gm.graph)    # (whole graph, {whole node: piece node}) or None
"""

from __future__ import annotations

import weakref

import torch.fx

from .. import _compat

_WHOLE = "dynstep_whole_node"     # node.meta: the same node in Dynamo's whole graph
_PIECE = "dynstep_piece"          # node.meta: which piece (0, 1, ...) in compile order
_COUNT: "weakref.WeakKeyDictionary[torch.fx.Graph, int]" = weakref.WeakKeyDictionary()


def link(gm: torch.fx.GraphModule) -> int | None:
    """While a backend compiles `gm`: when it is a piece of the graph Dynamo compiles, link its nodes to
    the whole graph's and return the piece's number; None for a whole graph."""
    whole = _compat.dynamo_graph()
    if whole is None or whole is gm.graph:
        return None
    by_value = {id(v): n for n in whole.nodes if (v := n.meta.get("example_value")) is not None}
    linked = {n: by_value.get(id(n.meta.get("example_value"))) for n in gm.graph.nodes
              if n.op in ("call_function", "call_method", "call_module")}
    if not linked or None in linked.values():
        return None                  # not made from that graph (a backend compiling something else)
    index = _COUNT.get(whole, 0)
    _COUNT[whole] = index + 1
    for n, w in linked.items():
        n.meta[_WHOLE], n.meta[_PIECE] = w, index
    return index


def whole_of(graph: torch.fx.Graph) -> tuple[torch.fx.Graph, dict[torch.fx.Node, torch.fx.Node]] | None:
    back = {n.meta[_WHOLE]: n for n in graph.nodes if _WHOLE in n.meta}
    if not back:
        return None
    return next(iter(back)).graph, back


def piece_index(graph: torch.fx.Graph) -> int | None:
    return next((n.meta[_PIECE] for n in graph.nodes if _PIECE in n.meta), None)


def first_piece(graph: torch.fx.Graph) -> bool:
    """A whole graph, or the piece holding the whole graph's first node (where whole-graph warnings go)."""
    found = whole_of(graph)
    if found is None:
        return True
    whole, back = found
    first = next((n for n in whole.nodes if n.op not in ("placeholder", "output")), None)
    return first in back
