"""Dynamo's own explanations of graph breaks: its registry of graph-break types and their pages.

Every graph break Dynamo reports has a type (``Unsupported Tensor.item() call with
capture_scalar_outputs=False``) registered with an id (``GB0124``), an explanation and hints in
``torch/_dynamo/graph_break_registry.json``, and a documentation page. `dynstep run`'s table reads
the hints from the structured trace's message; this is where a message without them is completed.

    graph_break_type("Unsupported Tensor.item() call with capture_scalar_outputs=False")
        -> GraphBreakType(gb_id="GB0124", explanation="...", hints=("Set `torch._dynamo.config...",), url="https://...")
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os


@dataclasses.dataclass(frozen=True)
class GraphBreakType:
    """One registered graph-break type, as plain data."""

    gb_id: str                  # "GB0124"
    explanation: str
    hints: tuple[str, ...]
    url: str                    # its page on the graph-break site ("" when torch gives none)


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, GraphBreakType]:
    # torch/_dynamo/graph_break_registry.json: {"GB0124": [{"Gb_type", "Context", "Explanation", "Hints"}]},
    # older entries of a renamed type first; torch/_dynamo/exc.py (_load_gb_type_to_gb_id_map) reads it
    # the same way, and get_gbid_documentation_link(gb_type) builds the page's address.
    import torch._dynamo

    path = os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return {}
    out: dict[str, GraphBreakType] = {}
    for gb_id, entries in raw.items() if isinstance(raw, dict) else ():
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and isinstance(entry.get("Gb_type"), str):
                hints = tuple(h for h in entry.get("Hints") or () if isinstance(h, str))
                out[entry["Gb_type"]] = GraphBreakType(str(gb_id), str(entry.get("Explanation") or ""), hints,
                                                       _link(entry["Gb_type"]))
    return out


def _link(gb_type: str) -> str:
    try:
        from torch._dynamo.exc import get_gbid_documentation_link
    except ImportError:   # a torch before the graph-break site
        return ""
    return get_gbid_documentation_link(gb_type) or ""


def graph_break_type(gb_type: str) -> GraphBreakType | None:
    """The registered type of that name (the first line of Dynamo's message), or None."""
    return _registry().get(gb_type.strip())
