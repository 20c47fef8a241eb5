"""Comparing two recorded runs node by node (`dynstep.compare`, `dynstep compare A B`).

    cmp = dynstep.compare("a.dynstep", "b.dynstep", rtol=1e-4)
    cmp.ok, cmp.first_divergence, cmp.unmatched.a_only, cmp.show(), cmp.to_json(), cmp.to_html("cmp.html")

Modules: `align` (the two runs' nodes lined up by their stable identity, dynstep.graph.identity),
`values` (whether two hits hold the same value: tensors or statistics), `api` (the entry point),
`result` (dataclasses, JSON). The engine only: the terminal view and the page are front ends
(`dynstep.front.compare_show`, `dynstep.front.compare_html`), reached through `show()` / `to_html()`.
"""

from __future__ import annotations

from .api import compare
from .result import Comparison, Divergence, NodeRef, Side, Unmatched
from .values import Tolerance

__all__ = ["Comparison", "Divergence", "NodeRef", "Side", "Tolerance", "Unmatched", "compare"]
