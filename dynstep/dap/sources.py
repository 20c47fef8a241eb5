"""Virtual sources: text a client shows like a file but that exists only in the debugged process.

A compiled graph's listing (one line per node: the node, its op, module and source line), the
graph traced so far and the guards at a compile-time stop. Each text gets a `sourceReference` for
the session (the same graph keeps its number, so an editor's open tab stays valid).

    ref, line = SOURCES.graph("forward[0/0]", "add_3")     # (sourceReference, line of the node)
    SOURCES.content(ref)
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..graph import info as gi
from ..step.graphs import GRAPHS

HEADER_LINES = 2


class Sources:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, int] = {}
        self._texts: dict[int, tuple[str, str]] = {}       # ref -> (name, content)

    def add(self, key: str, name: str, content: str) -> int:
        with self._lock:
            ref = self._by_key.get(key)
            if ref is None:
                ref = self._by_key[key] = len(self._by_key) + 1
            self._texts[ref] = (name, content)
            return ref

    def content(self, ref: object) -> str:
        item = self._texts.get(ref) if type(ref) is int else None   # type: ignore[arg-type]
        if item is None:
            raise KeyError(ref)
        return item[1]

    def graph(self, graph_id: str, node: str) -> tuple[int, int, str] | None:
        """(sourceReference, the node's line, the source's name) for a registered graph, else None."""
        entry = GRAPHS.get(graph_id)
        if entry is None:
            return None
        lines = [f"# {graph_id}: the compiled graph as dynstep steps it, one line per node",
                 "# node = op    # module · source line"]
        where = 0
        for i, row in enumerate(entry.rows):
            if row.node == node:
                where = i + HEADER_LINES + 1
            stop = "" if row.site is not None else "   (no stop point)"
            lines.append(f"{row.node} = {row.target}    # {row.module or '-'} · {row.source or '?'}{stop}")
        name = virtual_name(graph_id, "graph")
        return self.add("graph:" + graph_id, name, "\n".join(lines) + "\n"), where or 1, name

    def listing(self, graph_id: str) -> dict[str, Any] | None:
        """A registered graph's listing as a DAP Source (None: no such graph)."""
        found = self.graph(graph_id, "")
        if found is None:
            return None
        return {"name": found[2], "sourceReference": found[0], "origin": "compiled graph"}

    def loaded(self) -> list[dict[str, Any]]:
        """`loadedSources`: every compiled graph's listing, the user files those graphs come from, and
        the other texts shown so far (graph so far, guards, bytecode)."""
        out, seen_refs, files = [], set(), {}
        for entry in GRAPHS.all():
            source = self.listing(entry.graph_id)
            if source is not None:
                out.append(source)
                seen_refs.add(source["sourceReference"])
            for node in entry.graph.nodes:
                for file in {f.file for f in gi.user_frames(node)} - set(files):
                    if os.path.isfile(file):
                        files[file] = {"name": os.path.basename(file), "path": os.path.abspath(file)}
        with self._lock:
            others = [(ref, name) for ref, (name, _) in self._texts.items() if ref not in seen_refs]
        out += [{"name": name, "sourceReference": ref, "origin": "dynstep"} for ref, name in sorted(others)]
        return out + list(files.values())


def virtual_name(label: str, kind: str) -> str:
    """An editor shows a source's basename as the tab title: no '/' (forward[0/0] would read "0]"),
    and a .py ending for Python highlighting."""
    return f"{label.replace('/', '_')}.{kind}.py"
