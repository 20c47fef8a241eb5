"""The run-time registry of graphs with stop points: their listings (what `graph` shows) and the
sites a `break SEL` picks in them, with the pause pass's selector semantics.

The pause pass (backends/pause_pass.py) puts an entry here for every graph it gives stop points;
listeners (an editor re-verifying its breakpoints) hear of each new graph.

    GRAPHS.put(GraphEntry("forward[0/0]", rows, graph)); GRAPHS.get("forward[0/0]").rows
    break_sites(selectors.parse("module:blocks.0"))      -> {site ids}
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import torch.fx

from ..core.records import GraphRow
from ..graph import info as gi
from ..graph import selectors as sel


@dataclasses.dataclass(frozen=True)
class GraphEntry:
    graph_id: str
    rows: tuple[GraphRow, ...]
    graph: torch.fx.Graph       # kept to evaluate `break SEL` with the full selector semantics


class GraphRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._graphs: dict[str, GraphEntry] = {}
        self._listeners: list[Callable[[GraphEntry], None]] = []

    def put(self, entry: GraphEntry) -> None:
        with self._lock:
            self._graphs[entry.graph_id] = entry
            listeners = list(self._listeners)
        for listener in listeners:
            listener(entry)

    def listen(self, listener: Callable[[GraphEntry], None]) -> None:
        with self._lock:
            if listener not in self._listeners:
                self._listeners.append(listener)

    def unlisten(self, listener: Callable[[GraphEntry], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def get(self, graph_id: str) -> GraphEntry | None:
        return self._graphs.get(graph_id)

    def all(self) -> list[GraphEntry]:
        return list(self._graphs.values())


GRAPHS = GraphRegistry()


def break_sites(selector: sel.Selector) -> set[int]:
    """Every registered stop site a `break SEL` selector picks, with the pass's selector semantics."""
    out: set[int] = set()
    for entry in GRAPHS.all():
        by_name = {row.node: row.site for row in entry.rows if row.site is not None}
        for m in sel.select(entry.graph, [selector], aten_level=False):
            for node in gi.tensor_nodes(m.node):
                if node.name in by_name:
                    out.add(by_name[node.name])
    return out
