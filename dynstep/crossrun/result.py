"""What comparing two runs finds: `Comparison`, its `Divergence`, the nodes of one run only, and
per-module curves. Frozen dataclasses; `to_json()` is the stable machine-readable form:

    {"first_divergence": {"module", "source", "line_text", "op", "node", "a": {...}, "b": {...}, ...} | null,
     "unmatched": {"a_only": [...], "b_only": [...]}, "ok", "summary", "aligned", "compared", ...}

`show()` and `to_html()` go to the renderers a front end registered ("compare.show",
"compare.html"): the result does not know its front end.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core import wiring
from ..core.jsonsafe import json_safe
from ..core.records import Snapshot, Stats


@dataclasses.dataclass(frozen=True)
class Side:
    """One run's hit at the divergence: where it is in the user's code and what it held."""

    node: str
    op: str
    module: str
    source: str               # "file:line" in this run (line numbers may differ between runs)
    line_text: str
    identity: str
    graph: str
    step: int                 # which time this node ran in its run (0: the first)
    call: int
    shape: tuple[int, ...]
    dtype: str
    stats: Stats

    @classmethod
    def of(cls, hit: Snapshot, step: int) -> "Side":
        return cls(node=hit.node, op=hit.target, module=hit.module, source=hit.source, line_text=hit.source_text,
                   identity=hit.identity, graph=hit.graph, step=step, call=hit.call, shape=tuple(hit.shape),
                   dtype=hit.dtype, stats=hit.stats)


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The first node, in A's order, whose value (or statistics) differ beyond tolerance in B."""

    module: str               # A's side, as the user wrote it
    source: str
    line_text: str
    op: str
    node: str
    kind: str                 # "value" or "grad"
    a: Side
    b: Side
    match: str                # how the two were aligned: "exact", "module+op" or "module"
    compared: str             # "values" (both runs kept tensors) or "stats"
    max_abs: float
    max_rel: float
    stat: str                 # stats: which statistic (or "shape", "nan", "inf") differs most
    rtol: float
    atol: float

    @property
    def where(self) -> str:
        mod = f" in {self.module}" if self.module else ""
        return f"{self.node} ({self.op}){mod} at {self.source or '?'}"


@dataclasses.dataclass(frozen=True)
class NodeRef:
    """A node present in one run only."""

    kind: str
    node: str
    op: str
    module: str
    source: str
    line_text: str
    identity: str
    hits: int


@dataclasses.dataclass(frozen=True)
class Unmatched:
    a_only: tuple[NodeRef, ...] = ()
    b_only: tuple[NodeRef, ...] = ()


@dataclasses.dataclass(frozen=True)
class CurvePoint:
    label: str
    a_mean: float
    a_std: float
    b_mean: float
    b_std: float


@dataclasses.dataclass(frozen=True)
class ModuleCurve:
    """A module's values in both runs: per step (its last node), or per node when one step was recorded."""

    module: str
    axis: str                 # "step" or "node"
    points: tuple[CurvePoint, ...]


@dataclasses.dataclass(frozen=True)
class Comparison(wiring.Rendered):
    """The result of `dynstep.compare(a, b)`. `to_json()`, `to_html()` (a self-contained page with
    per-module curves of both runs, the renderer "compare.html"), `show()` (the first divergence and
    what did not align, in the terminal)."""

    RENDERER = "compare"

    a: str
    b: str
    first_divergence: Divergence | None
    unmatched: Unmatched
    aligned: tuple[tuple[str, int], ...] = ()    # (match, node count) for each way nodes were paired
    compared: int = 0                             # hit pairs compared
    steps: tuple[int, int] | None = None          # (A's step, B's step) when one step was chosen
    curves: tuple[ModuleCurve, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.first_divergence is None

    def summary(self) -> str:
        only = f"; {len(self.unmatched.a_only)} node(s) only in A, {len(self.unmatched.b_only)} only in B"
        d = self.first_divergence
        if d is None:
            return f"dynstep compare: {self.compared} hit(s) compared, no node differs beyond tolerance{only}"
        line = f" `{d.line_text}`" if d.line_text else ""
        how = f"max |a-b| {d.max_abs:.3g}" if d.compared == "values" else f"{d.stat} differs"
        return (f"dynstep compare: first divergence {d.where}{line}, step {d.a.step} vs {d.b.step} "
                f"({how}; matched {d.match}){only}")

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "curves"}
        out["aligned"] = dict(self.aligned)
        out.update(ok=self.ok, summary=self.summary())
        return json_safe(out)

