"""What a diff finds: `NodeDiff`, `NanOrigin`, `LadderStep`, `GraphDiff` and `DiffReport`.

Frozen dataclasses that cross from the engine to the front ends; `to_json()` is the stable
machine-readable form (non-finite floats become the strings "inf", "-inf", "nan").

    report.ok, report.first_divergence.source, report.first_divergence.module
    report.show(); report.to_json(); report.to_html("diff.html")

`show()` and `to_html()` go to renderers the front end registers (`dynstep.core.wiring`): the
result does not know its front end.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch.fx

from ..core import wiring
from ..core.jsonsafe import json_safe
from ..core.records import dtype_name
from ..graph import info as gi
from .judge import Metrics, Tolerance, verdict


@dataclasses.dataclass(frozen=True)
class NodeDiff:
    """One compiled value compared with eager and float64, named as the user wrote it."""

    node: str
    target: str
    module: str
    source: str               # "file:line" of the user's code
    source_text: str          # the text of that line
    shape: tuple[int, ...]
    dtype: str
    diverged: bool
    error: float              # RMS(compiled - fp64)
    ref_error: float          # RMS(eager - fp64)
    budget: float             # factor * ref_error + floor
    ratio: float              # error / ref_error
    max_abs: float            # max |compiled - eager|
    max_rel: float
    cosine: float
    new_nonfinite: int = 0
    order: int = -1           # position of the node in the graph's execution order
    graph: str = ""
    kind: str = "value"       # "value", "output" or "grad"
    own: bool | None = None   # True: error is new at this node; False: inherited; None: not checked
    kernel: str = ""          # the generated kernel, when the compiler says
    verdict: str = ""         # against float64: "compiled worse", "eager worse" or "rounding" (judge.verdict)

    @classmethod
    def of(cls, node: torch.fx.Node, value: Any, m: Metrics, *, order: int, graph: str, kind: str = "value",
           own: bool | None = None, tol: Tolerance | None = None) -> "NodeDiff":
        src, text = gi.source(node)
        shape = tuple(value.shape) if hasattr(value, "shape") else ()
        dtype = dtype_name(value.dtype) if hasattr(value, "dtype") else type(value).__name__
        return cls(node=node.name, target=gi.op_name(node), module=gi.module_path(node), source=src,
                   source_text=text, shape=shape, dtype=dtype, diverged=m.diverged, error=m.error,
                   ref_error=m.ref_error, budget=m.budget, ratio=m.ratio, max_abs=m.max_abs,
                   max_rel=m.max_rel, cosine=m.cosine, new_nonfinite=m.new_nonfinite, order=order,
                   graph=graph, kind=kind, own=own,
                   verdict=verdict(m, getattr(value, "dtype", None), tol or Tolerance()))

    @property
    def where(self) -> str:
        mod = f" in {self.module}" if self.module else ""
        kernel = f", kernel {self.kernel}" if self.kernel else ""
        return f"{self.node} ({self.target}){mod} at {self.source or '?'}{kernel}"


@dataclasses.dataclass(frozen=True)
class NanOrigin:
    """The first node producing NaN/Inf that its inputs did not contain."""

    run: str                  # "eager" or "compiled"
    node: str
    target: str
    module: str
    source: str
    source_text: str
    nan: int
    inf: int
    order: int = -1
    graph: str = ""

    @classmethod
    def of(cls, run: str, node: torch.fx.Node, value: Any, *, order: int, graph: str) -> "NanOrigin":
        import torch

        src, text = gi.source(node)
        nan = int(value.isnan().sum()) if isinstance(value, torch.Tensor) and value.is_floating_point() else 0
        inf = int(value.isinf().sum()) if isinstance(value, torch.Tensor) and value.is_floating_point() else 0
        return cls(run, node.name, gi.op_name(node), gi.module_path(node), src, text, nan, inf, order, graph)


@dataclasses.dataclass(frozen=True)
class LadderStep:
    """One rung of the backends ladder: does this stage alone reproduce the divergence?"""

    backend: str
    diverged: bool
    error: float              # worst output RMS error against fp64
    budget: float
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Ablation:
    """One thing tried on the divergent node's subgraph, and whether it removed the divergence."""

    name: str                 # "fusion off", "inductor: post_grad_passes disabled", "backend aot_eager", ...
    fixed: bool


_WHAT = {"lowerings": "disabling Inductor's lowering of {detail}",
         "decompositions": "disabling the decomposition of {detail}",
         "post_grad_passes": "disabling Inductor's post-grad pass {detail}",
         "joint_graph_passes": "disabling Inductor's joint-graph pass {detail}",
         "pre_grad_passes": "disabling Inductor's pre-grad pass {detail}", "cudagraphs": "disabling CUDA graphs",
         "fusion": "turning Inductor's fusion off", "precision": "computing in float64 ({detail})"}


@dataclasses.dataclass(frozen=True)
class RootCause:
    """Which compiler subsystem changed the first divergent node: the first ablation, run on that
    node's subgraph with the inputs the compiled program fed it, that removes the divergence."""

    subsystem: str            # "lowerings", "post_grad_passes", "decompositions", "fusion", "precision",
                              # a config field ("fallback_random", "emulate_precision_casts", ...), ...
    detail: str               # "aten.tanh", a pass name, "emulate_precision_casts=True", ...
    kernel: str               # the kernel that computed the node (the whole program's compile)
    node: str                 # the first divergent node it applies to
    module: str = ""
    source: str = ""
    source_text: str = ""
    stage: str = ""           # the CompilerBisector backend first showing it: "inductor", "aot_eager_decomp_partition"
    number: int | None = None  # which application of the subsystem (CompilerBisector's bisect number)
    subgraph_nodes: int = 1   # nodes in the subgraph the ablations ran on
    ablations: tuple[Ablation, ...] = ()
    compiles: int = 0
    seconds: float = 0.0

    @property
    def sentence(self) -> str:
        """'fixed by disabling Inductor's lowering of aten.tanh (lowerings #0); kernel …; node …'."""
        what = _WHAT.get(self.subsystem, "setting Inductor config {detail}").format(detail=self.detail)
        number = f" #{self.number}" if self.number is not None else ""
        tag = f" ({self.subsystem}{number})" if self.subsystem not in ("fusion", "precision") else ""
        kernel = f"; kernel {self.kernel}" if self.kernel else ""
        mod = f" in {self.module}" if self.module else ""
        return f"fixed by {what}{tag}{kernel}; node {self.node}{mod} at {self.source or '?'}"


@dataclasses.dataclass(frozen=True)
class GraphDiff:
    """Everything found for one call of one compiled graph."""

    graph: str
    call: int
    backend: str
    ok: bool
    outputs: tuple[NodeDiff, ...]
    nodes: tuple[NodeDiff, ...]              # every value measured, in execution order
    first_divergence: NodeDiff | None
    fusion_dependent: bool = False           # outputs diverge but no probed node does
    nan_eager: NanOrigin | None = None
    nan_compiled: NanOrigin | None = None
    ladder: tuple[LadderStep, ...] = ()
    grads: tuple[NodeDiff, ...] = ()         # gradients of the graph's inputs (training=True)
    grad_divergence: NodeDiff | None = None  # the forward node a divergent gradient belongs to
    compiles: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    repro: str = ""                          # path of the repro script, when written
    root_cause: RootCause | None = None      # which compiler subsystem changed the first divergence


@dataclasses.dataclass(frozen=True)
class DiffReport(wiring.Rendered):
    """The result of `dynstep.diff`: one `GraphDiff` per compiled graph call. `to_json()`, `to_html()` (a
    self-contained page, the renderer "diff.html"), `show()` (a table per graph call in the terminal)."""

    RENDERER = "diff"

    backend: str
    graphs: tuple[GraphDiff, ...]

    @property
    def ok(self) -> bool:
        return all(g.ok for g in self.graphs)

    @property
    def first_divergence(self) -> NodeDiff | None:
        for g in self.graphs:
            if g.first_divergence is not None:
                return g.first_divergence
        return None

    @property
    def grad_divergence(self) -> NodeDiff | None:
        return next((g.grad_divergence for g in self.graphs if g.grad_divergence is not None), None)

    @property
    def root_cause(self) -> RootCause | None:
        """Which compiler subsystem changed the first divergent node (None: none found, or no divergence)."""
        return next((g.root_cause for g in self.graphs if g.first_divergence is not None), None)

    @property
    def nan_origin(self) -> NanOrigin | None:
        for g in self.graphs:
            if g.nan_compiled is not None or g.nan_eager is not None:
                return g.nan_compiled or g.nan_eager
        return None

    @property
    def nodes(self) -> tuple[NodeDiff, ...]:
        return tuple(n for g in self.graphs for n in g.nodes)

    def summary(self) -> str:
        if not self.graphs:
            return "dynstep diff: no compiled graph ran"
        if self.ok:
            return f"dynstep diff: {len(self.graphs)} graph call(s) under {self.backend}: no divergence"
        first = self.first_divergence or self.grad_divergence
        if first is not None:
            line = f" `{first.source_text}`" if first.source_text else ""
            what = "first divergence" if first is self.first_divergence else "first divergent gradient, from"
            verdict = f", {first.verdict}" if first.verdict else ""
            cause = self.root_cause
            why = f"; {cause.sentence.split('; kernel')[0].split('; node')[0]}" if cause is not None else ""
            return (f"dynstep diff: {what} {first.where}{line} (error {first.error:.3g} > {first.budget:.3g}"
                    f"{verdict}){why}")
        if any(g.fusion_dependent for g in self.graphs):
            return "dynstep diff: outputs diverge, but the divergence disappears once probed (fusion-dependent)"
        return "dynstep diff: outputs diverge (see the report)"

    def to_dict(self) -> dict[str, Any]:
        return json_safe({"backend": self.backend, "ok": self.ok, "summary": self.summary(),
                          "first_divergence": self.first_divergence, "root_cause": self.root_cause,
                          "graphs": list(self.graphs)})

