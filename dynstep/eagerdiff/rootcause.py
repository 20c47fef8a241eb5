"""Below the first divergent node: which compiler subsystem changed it.

Once the diff names the first divergent node, its subgraph is cut at the boundary the repro uses
(the node alone, its inputs the values the compiled program fed it; when that alone does not
diverge, the node with its producers, their inputs captured by one more probed compile) and
recompiled under ablations, each a compile of a few nodes rather than of the program:

1. Inductor with fusion off (every scheduler node its own kernel);
2. torch's CompilerBisector (dynstep._compat.bisector), driven on the subgraph: the backends in
   turn (eager, aot_eager, aot_eager_decomp_partition and its crossref check, inductor), then in
   the first that diverges each subsystem disabled (decompositions and CSE; pre-grad, joint-graph
   and post-grad passes; fallback_random, emulate_precision_casts, layout optimisation,
   comprehensive padding; cudagraphs; the lowerings), and the one that fixes it bisected to one
   application: which lowering, which pass, which decomposition;
3. the subgraph compiled in float64: when only that removes it, the divergence is float rounding.

The first that removes the divergence is the root cause.

    cause = find_root_cause(differ, node, first, fed)     # RootCause(subsystem="lowerings", detail="aten.tanh", ...)
"""

from __future__ import annotations

import dataclasses
import operator
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from .. import _compat
from .._compat import bisector
from ..core.records import dtype_name
from ..graph import info as gi
from . import _backends
from .judge import Reference, fetch_attr, judge_value, to_fp64
from .kernels import kernel_for
from .report import Ablation, NodeDiff, RootCause

STAGES = ("inductor", "aot_eager_decomp_partition")   # backends whose subsystems CompilerBisector knows
SUBSYSTEMS = {"decomposition": "decompositions"}      # CompilerBisector's names -> the report's
MAX_DEPTH = 1                                         # producers added when the node alone does not diverge


@dataclasses.dataclass
class Boundary:
    """A few nodes of the graph as their own GraphModule, with the inputs the compiled program fed them."""

    gm: torch.fx.GraphModule
    inputs: list[Any]
    target: torch.fx.Node              # the divergent node's copy
    eager: Any
    fp64: Any
    nodes: int
    differ: Any
    compiles: int = 0
    codes: list[str] = dataclasses.field(default_factory=list)

    def diverges(self, backend: str, *, options: dict[str, Any] | None = None, fp64: bool = False) -> bool:
        """Compile with `backend` (and Inductor `options`), run once, judge the node's value."""
        inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in self.inputs]
        self.compiles += 1
        with torch.no_grad():
            merged = {**(self.differ.cfg.options or {}), **(options or {})} if backend == "inductor" else None
            fn = _compile(self.gm, to_fp64(inputs) if fp64 else inputs, backend, self.differ.cfg.mode, merged)
            out = list(fn(*(to_fp64(inputs) if fp64 else inputs)))
        value = out[0] if len(out) == 1 and not isinstance(self.eager, (tuple, list)) else tuple(out)
        return judge_value(value, self.eager, self.fp64, self.differ.cfg.tol)[0].diverged


def _compile(gm: torch.fx.GraphModule, inputs: list[Any], backend: str, mode: str | None,
             options: dict[str, Any] | None) -> Any:
    if backend == "inductor":
        return bisector.inductor_with_options(mode, options)(gm, inputs)
    return _backends.compile_graph(gm, inputs, backend, mode=None)


def find_root_cause(differ: Any, node: torch.fx.Node, first: NodeDiff,
                    fed: dict[torch.fx.Node, Any] | None) -> RootCause | None:
    """The first ablation that removes the divergence of `node`, or None (with a note saying why)."""
    backend = differ.cfg.backend
    if not isinstance(backend, str) or backend not in STAGES:
        differ.notes.append(f"root cause: not searched; CompilerBisector knows the subsystems of "
                            f"{' and '.join(STAGES)}, not of backend {_backends.backend_name(backend)!r}")
        return None
    why = bisector.unavailable()
    if why is not None:
        differ.notes.append(f"root cause: not searched; {why}")
        return None
    t0 = time.perf_counter()
    differ.tick("root cause: the divergent node's subgraph")
    with bisector.fresh_compiles():   # each ablation a real compile: no cached artifact answers for it
        boundary = _reproducing(differ, node, fed, backend)
        cause = _ablate(differ, boundary, backend) if boundary is not None else None
    if cause is None:
        return None
    kernel = first.kernel or kernel_for(boundary.codes, boundary.target.name, gi.op_name(node))
    return dataclasses.replace(cause, kernel=kernel, node=first.node, module=first.module, source=first.source,
                               source_text=first.source_text, subgraph_nodes=boundary.nodes,
                               compiles=boundary.compiles, seconds=time.perf_counter() - t0)


def _reproducing(differ: Any, node: torch.fx.Node, fed: dict[torch.fx.Node, Any] | None,
                 backend: str) -> Boundary | None:
    """The smallest boundary (the node alone, then with its producers) on which the divergence shows."""
    for depth in range(MAX_DEPTH + 1):
        region = _region(differ, node, depth)
        values = _values(differ, region, fed if depth == 0 else None)
        if values is None:
            differ.notes.append(f"root cause: not searched; the inputs of {node.name}'s subgraph could not be captured")
            return None
        boundary = _boundary(differ, region, values)
        try:
            with _compat.inductor_output_code() as codes:
                diverges = boundary.diverges(backend)
        except Exception as exc:   # a subgraph the backend cannot compile alone is reported, not fatal
            differ.notes.append(f"root cause: not searched; {backend} cannot compile {node.name}'s subgraph: "
                                f"{exc!r}"[:300])
            return None
        if diverges:
            boundary.codes = codes
            return boundary
    differ.notes.append(f"root cause: not searched; {node.name} with its producers does not diverge when compiled "
                        f"on its own (the divergence depends on the rest of the graph)")
    return None


def _region(differ: Any, node: torch.fx.Node, depth: int) -> list[torch.fx.Node]:
    region = {node}
    for _ in range(depth):
        region |= {a for n in region for a in n.all_input_nodes if a in differ.pos}
    return sorted(region, key=differ.pos.__getitem__)


def _values(differ: Any, region: Sequence[torch.fx.Node],
            fed: dict[torch.fx.Node, Any] | None) -> dict[torch.fx.Node, Any] | None:
    """The value of every input of the region: graph inputs, attributes, and compiled values (those the
    search captured, else one probed compile)."""
    inside = set(region)
    wanted = list(dict.fromkeys(a for n in region for a in n.all_input_nodes if a not in inside))
    env = dict(zip([n for n in differ.gm.graph.nodes if n.op == "placeholder"], differ.inputs))
    computed = [a for a in wanted if a in differ.pos]
    compiled = dict(fed or {})
    if any(a not in compiled for a in computed):
        compiled = differ.capture(computed)
    out: dict[torch.fx.Node, Any] = {}
    for a in wanted:
        if a in compiled:
            out[a] = compiled[a]
        elif a in env:
            out[a] = env[a]
        elif a.op == "get_attr":
            out[a] = fetch_attr(differ.gm, a.target)
        else:
            return None
    return out


def _boundary(differ: Any, region: list[torch.fx.Node], values: dict[torch.fx.Node, Any]) -> Boundary:
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, Any] = {}
    inputs: list[Any] = []
    for a, value in values.items():
        if isinstance(value, torch.Tensor):
            env[a] = graph.placeholder(a.name)
            inputs.append(value.detach().clone())
        elif isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
            env[a] = tuple(graph.placeholder(f"{a.name}_{i}") for i in range(len(value)))
            inputs += [v.detach().clone() for v in value]
        else:
            env[a] = value
    for n in region:
        env[n] = graph.node_copy(n, lambda a: env[a])
    target = env[region[-1]]
    value = gi.example_value(region[-1])
    if isinstance(value, (tuple, list)):
        graph.output(tuple(graph.call_function(operator.getitem, (target, i)) for i in range(len(value))))
    else:
        graph.output((target,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    step = next(s for s in Reference(gm, inputs, keep=lambda n: n is target, last=target) if s.node is target)
    return Boundary(gm, inputs, target, step.eager, step.fp64, len(region), differ)


def _ablate(differ: Any, boundary: Boundary, backend: str) -> RootCause | None:
    tried: list[Ablation] = []
    if backend == "inductor":
        differ.tick("root cause: fusion off")
        fixed = not _safe(boundary, backend, options=dict(bisector.NO_FUSION))
        tried.append(Ablation("inductor: fusion off", fixed))
        if fixed:
            return _cause("fusion", "max_fusion_size=1, no epilogue/prologue fusion", backend, None, tried)
    differ.tick("root cause: CompilerBisector on the subgraph")
    found = bisector.bisect(lambda stage: not _safe(boundary, stage))
    tried += _trail(found)
    if found is not None and found.subsystem is not None:
        subsystem = found.config[0][0] if found.config else SUBSYSTEMS.get(found.subsystem, found.subsystem)
        detail = (f"{found.config[0][0]}={found.config[0][1]}" if found.config else found.op or found.debug_info)
        return _cause(subsystem, detail, found.backend, found.number, tried)
    differ.tick("root cause: float64")
    fixed = not _safe(boundary, backend, fp64=True)
    tried.append(Ablation("float64 compile", fixed))
    if fixed:
        return _cause("precision", f"float rounding at {_dtype(boundary)}", backend, None, tried)
    stage = f" (it first shows in the {found.backend} stage)" if found is not None else ""
    differ.notes.append("root cause: no ablation removed the divergence on the node's subgraph" + stage + "; tried "
                        + ", ".join(a.name for a in tried))
    return None


def _safe(boundary: Boundary, backend: str, **kwargs: Any) -> bool:
    """Whether the subgraph diverges; a compile that fails under an ablation counts as diverging."""
    try:
        return boundary.diverges(backend, **kwargs)
    except Exception as exc:
        boundary.differ.notes.append(f"root cause: {backend} {kwargs or ''} failed on the subgraph: {exc!r}"[:300])
        return True


def _trail(found: bisector.Bisected | None) -> list[Ablation]:
    if found is None:
        return [Ablation("CompilerBisector: every backend is good on the subgraph", False)]
    out = []
    for step in found.steps:
        if not step.subsystem:
            out.append(Ablation(f"compiled with {step.backend}", step.good))
        elif step.state == "test_disable":
            what = f"config {step.change}" if step.change else f"{step.subsystem} disabled"
            out.append(Ablation(f"{step.backend}: {what}", step.good))
    bisects = sum(1 for s in found.steps if s.state in ("find_max_bounds", "bisect"))
    if bisects:
        out.append(Ablation(f"{found.subsystem} bisected in {bisects} compile(s): #{found.number}", True))
    return out


def _cause(subsystem: str, detail: str, stage: str, number: int | None, tried: list[Ablation]) -> RootCause:
    return RootCause(subsystem=subsystem, detail=detail, kernel="", node="", stage=stage, number=number,
                     ablations=tuple(tried))


def _dtype(boundary: Boundary) -> str:
    value = boundary.eager[0] if isinstance(boundary.eager, (tuple, list)) else boundary.eager
    return dtype_name(value.dtype) if hasattr(value, "dtype") else "?"
