"""The diff engine: compare one compiled graph call with eager and float64, and search.

Order of work for one graph call (the observer effect decides it: every probe is a graph
output that the compiler must materialise, which can change what it fuses):

1. compile the graph as is and compare its outputs only;
2. if they diverge, search the execution order (search.py): each round probes the values
   crossing three cuts in one compile and keeps the quarter where the divergence starts;
3. once a few nodes are left, one compile probes them and their inputs, and each is rerun
   eagerly and in float64 on its *compiled* inputs, so an error a node merely inherits is told
   apart from its own; if none has its own, a dense scan of the whole prefix decides; a
   divergence that vanishes once probed is reported as fusion-dependent instead of naming a
   wrong node;
4. NaN/Inf origin (eager from the reference run, compiled by the same search) and the
   backends ladder (which stage first reproduces the divergence).

    cfg = DiffConfig(backend="inductor")
    gd = diff_graph(gm, inputs, cfg, graph="forward[0/0]", call=0)     # -> GraphDiff

Memory: the reference run drops values after their last use; a compiled value is dropped once
judged, and a search round holds one cut's values at a time. Nothing measured keeps a tensor.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from .. import _compat
from ..graph import info as gi
from ..core.errors import DynstepError
from . import _backends, search
from .kernels import kernel_for
from .judge import Metrics, Reference, Tolerance, call_node, fetch_attr, judge_value, nonfinite, to_fp64
from .probed import ProbedRun, is_tensorish, output_nodes
from .report import GraphDiff, LadderStep, NanOrigin, NodeDiff

CALLS = ("call_function", "call_method", "call_module")
_CONFIGURED: Any = object()  # compile/measure: the mode of the diff's own configuration
Progress = Callable[[str, int, int], None]   # (what, step, total); may have done(): called when a graph's diff ends


@dataclasses.dataclass(frozen=True)
class DiffConfig:
    backend: Any = "inductor"
    mode: str | None = None
    tol: Tolerance = Tolerance()
    ladder: bool = True
    training: bool = False
    repro_dir: str | None = None
    progress: Progress | None = None
    backend_ref: str | None = None   # "module:attribute" that imports a callable backend (for repros)
    root_cause: bool = True          # ablate the first divergent node's subgraph (rootcause.py)
    options: dict | None = None      # Inductor options, as torch.compile(options=...) takes them


@dataclasses.dataclass(frozen=True)
class Measured:
    """What one compiled run showed, judged against one reference run (no tensors are kept)."""

    outputs: tuple[NodeDiff, ...]
    values: dict[torch.fx.Node, NodeDiff]
    nan_eager: NanOrigin | None
    outputs_nonfinite: bool

    @property
    def outputs_diverged(self) -> bool:
        return any(d.diverged for d in self.outputs)


class GraphDiffer:
    """Diffs one call of one graph; holds the compile count and everything measured."""

    def __init__(self, gm: torch.fx.GraphModule, inputs: Sequence[Any], cfg: DiffConfig, *, graph: str) -> None:
        self.gm, self.inputs, self.cfg, self.graph = gm, list(inputs), cfg, graph
        self.order = [n for n in gm.graph.nodes if n.op in CALLS]
        self.pos = {n: i for i, n in enumerate(self.order)}
        self.compiles = 0
        self.seen: dict[str, NodeDiff] = {}
        self.notes: list[str] = []
        self.codes: list[str] = []
        self.steps = 0
        self.first_nan: NanOrigin | None = None
        self.fed: dict[torch.fx.Node, Any] | None = None
        self.total = 2 + search.rounds(len(self.order)) + (1 if cfg.training else 0)

    # -- running -------------------------------------------------------------------------
    def tick(self, what: str) -> None:
        self.steps += 1
        if self.cfg.progress is not None:
            self.cfg.progress(what, self.steps, max(self.total, self.steps))

    def compile(self, probes: Sequence[torch.fx.Node] = (), backend: Any = None,
                mode: str | None = _CONFIGURED) -> ProbedRun:
        backend = backend or self.cfg.backend
        mode = self.cfg.mode if mode is _CONFIGURED else mode
        try:
            run = ProbedRun.compile(self.gm, self.inputs, backend, probes=probes, mode=mode,
                                    options=self.cfg.options if backend == self.cfg.backend else None)
        except Exception as exc:
            raise DynstepError(
                f"dynstep diff: backend {_backends.backend_name(backend)!r} failed to compile graph "
                f"{self.graph} with {len(probes)} probed value(s) ({[p.name for p in probes][:5]}): {exc!r}. "
                "Diff with a backend that compiles this graph, or report the compile failure itself."
            ) from exc
        self.compiles += 1
        return run

    def measure(self, probes: Sequence[torch.fx.Node] = (), backend: Any = None,
                mode: str | None = _CONFIGURED) -> Measured:
        """Compile with `probes`, run once, judge the outputs and the probed values."""
        return self.check(self.compile(probes, backend, mode), probes)

    def check(self, run: ProbedRun, keep: Sequence[torch.fx.Node], *, outputs: bool = True) -> Measured:
        """Run a compiled copy once and judge the values in `keep` (and the outputs)."""
        outs, compiled = run(self.inputs, keep=keep, outputs=outputs)
        return self.judge_run(outs, compiled)

    def diverges(self, run: ProbedRun, nodes: Sequence[torch.fx.Node]) -> bool:
        """The search's test for a divergence: does one of `nodes` diverge."""
        return any(d.diverged for d in self.check(run, nodes, outputs=False).values.values())

    def nonfinite_in(self, run: ProbedRun, nodes: Sequence[torch.fx.Node]) -> bool:
        """The search's test for a NaN/Inf (no reference needed)."""
        return any(nonfinite(v) for v in run(self.inputs, keep=nodes, outputs=False)[1].values())

    def judge_run(self, outputs: list[Any], compiled: dict[torch.fx.Node, Any]) -> Measured:
        """Judge compiled outputs (if any) and values against one reference run, which stops
        after the last value judged when the outputs are not. Takes the tensors over: the
        compiled outputs are dropped here, each value once it is judged."""
        out_at: dict[torch.fx.Node, int] = {}
        for i, n in enumerate(output_nodes(self.gm) if outputs else ()):
            if isinstance(n, torch.fx.Node):
                out_at.setdefault(n, i)
        last = None if out_at else max(compiled, key=self.pos.__getitem__, default=None)
        out_diffs: list[NodeDiff] = []
        values: dict[torch.fx.Node, NodeDiff] = {}
        outputs_nonfinite = any(nonfinite(o) for o in outputs)
        reference = Reference(self.gm, self.inputs, keep=lambda n: n in compiled or n in out_at, last=last)
        with torch.no_grad():
            for step in reference:
                node = step.node
                if node in compiled:
                    values[node] = self._diff(node, compiled.pop(node), step.eager, step.fp64, "value")
                if node in out_at:
                    out_diffs.append(self._diff(node, outputs[out_at[node]], step.eager, step.fp64, "output"))
        outputs.clear()
        nan_eager = None
        if reference.nan_origin is not None:
            node, value = reference.nan_origin
            nan_eager = NanOrigin.of("eager", node, _first_tensor(value), order=self.pos[node], graph=self.graph)
        for d in list(values.values()) + out_diffs:
            self.seen[d.node] = d
        return Measured(tuple(out_diffs), values, nan_eager, outputs_nonfinite)

    def _diff(self, node: torch.fx.Node, compiled: Any, eager: Any, fp64: Any, kind: str,
              own: bool | None = None) -> NodeDiff:
        m, value = judge_value(compiled, eager, fp64, self.cfg.tol)
        return NodeDiff.of(node, value, m, order=self.pos.get(node, -1), graph=self.graph, kind=kind, own=own,
                           tol=self.cfg.tol)

    def kernel(self, node: torch.fx.Node) -> str:
        """The generated kernel that computed `node` in the unprobed compile, when known."""
        return kernel_for(self.codes, node.name, gi.op_name(node))

    def nan_origin(self, node: torch.fx.Node, value: Any) -> NanOrigin:
        return NanOrigin.of("compiled", node, _first_tensor(value), order=self.pos[node], graph=self.graph)

    # -- probing -------------------------------------------------------------------------
    def cut(self, p: int) -> list[torch.fx.Node]:
        """The values computed by the first `p` nodes that later nodes or the outputs read."""
        prefix = set(self.order[:p])
        return [n for n in self.order[:p] if is_tensorish(n) and any(u not in prefix for u in n.users)]

    def capture(self, nodes: Sequence[torch.fx.Node]) -> dict[torch.fx.Node, Any]:
        """The compiled values of `nodes`, from one probed compile (nothing judged)."""
        return self.compile(nodes)(self.inputs, outputs=False)[1]

    def inputs_of(self, node: torch.fx.Node, compiled: dict[torch.fx.Node, Any]) -> tuple[tuple, dict] | None:
        """The node's (args, kwargs) as the compiled program fed it; None when one is unknown."""
        env = dict(zip([n for n in self.gm.graph.nodes if n.op == "placeholder"], self.inputs))

        def value(a: torch.fx.Node) -> Any:
            if a in compiled:
                return compiled[a]
            if a in env:
                return env[a]
            if a.op == "get_attr":
                return fetch_attr(self.gm, a.target)
            raise KeyError(a.name)

        try:
            return torch.fx.node.map_arg((node.args, node.kwargs), value)
        except KeyError:
            return None

    def local(self, node: torch.fx.Node, compiled: dict[torch.fx.Node, Any]) -> Metrics | None:
        """The node's own error: rerun eagerly and in fp64 on its compiled inputs, judged."""
        fed = self.inputs_of(node, compiled) if node in compiled else None
        if fed is None:
            return None
        args, kwargs = fed
        with torch.no_grad():
            eager = call_node(node, self.gm, args, kwargs, fp64=False)
            try:
                ref64 = call_node(node, self.gm, to_fp64(args), to_fp64(kwargs), fp64=True)
            except (RuntimeError, TypeError, NotImplementedError):
                ref64 = None
        return judge_value(compiled[node], eager, ref64, self.cfg.tol)[0]

    # -- the whole analysis --------------------------------------------------------------
    def run(self, call: int) -> GraphDiff:
        t0 = time.perf_counter()
        self.tick("outputs only")
        with _compat.inductor_output_code() as codes:  # to name Inductor's kernels, if it is Inductor
            base = self.measure()
        self.codes = codes
        first, fusion, nan_compiled = None, False, None
        if base.outputs_diverged:
            first, fusion = self.find_first()
        if base.outputs_nonfinite:
            nan_compiled = self.find_nan()
        ladder = self.run_ladder() if self.cfg.ladder and base.outputs_diverged else ()
        repro, cause = "", None
        node = next((n for n in self.order if first is not None and n.name == first.node), None)
        if node is not None and self.cfg.root_cause:
            from .rootcause import find_root_cause

            cause = find_root_cause(self, node, first, self.fed)
        if node is not None and self.cfg.repro_dir:
            from .repro import write_repro

            repro = write_repro(self, node, self.cfg.repro_dir)
        nodes = tuple(sorted(self.seen.values(), key=lambda d: d.order))
        return GraphDiff(graph=self.graph, call=call, backend=_backends.backend_name(self.cfg.backend),
                         ok=not base.outputs_diverged, outputs=base.outputs, nodes=nodes,
                         first_divergence=first, fusion_dependent=fusion, nan_eager=base.nan_eager,
                         nan_compiled=nan_compiled, ladder=ladder, compiles=self.compiles,
                         seconds=time.perf_counter() - t0, notes=tuple(self.notes), repro=repro,
                         root_cause=cause)

    def find_first(self) -> tuple[NodeDiff | None, bool]:
        where = search.narrow(self, self.diverges, "divergence")
        pinned = search.pin_divergence(self, where.lo, where.hi, "confirming")
        if pinned.found is None and where.lo > 0:  # the search was misled: scan the whole prefix
            dense = search.pin_divergence(self, 0, where.hi, "dense scan")
            if dense.found is not None:
                self.notes.append(f"the search narrowed it to nodes {where.lo}..{where.hi - 1}, none of which "
                                  f"has its own error; a dense scan found {dense.found.node}")
            pinned = dense if dense.found is not None else pinned
        if pinned.found is not None:
            self.first_nan, self.fed = pinned.nan, pinned.fed
            return pinned.found, False
        probed = (*where.runs, pinned.run)
        if not all(self.check(run, (), outputs=True).outputs_diverged for run in probed):
            self.notes.append("the outputs diverge when only the outputs are probed, but not once "
                              "intermediate values are probed: a fusion-dependent divergence")
            return None, True
        self.notes.append(f"no single node's own error explains the output divergence "
                          f"(checked nodes 0..{where.hi - 1})")
        return None, False

    def find_nan(self) -> NanOrigin | None:
        if self.first_nan is not None:  # the first divergence is a new NaN/Inf: that is its origin
            return self.first_nan
        where = search.narrow(self, self.nonfinite_in, "nan origin")
        return search.pin_nonfinite(self, where.lo, where.hi)

    def run_ladder(self) -> tuple[LadderStep, ...]:
        out = []
        for backend, mode in _backends.ladder(self.cfg.backend, self.cfg.mode):
            name = _backends.rung_name(backend, mode)
            self.tick(f"ladder: {name}")
            try:
                m = self.measure(backend=backend, mode=mode)
            except Exception as exc:  # a rung that cannot compile this graph is reported, not fatal
                out.append(LadderStep(name, False, math.nan, math.nan, f"could not compile: {exc!r}"[:200]))
                continue
            worst = max(m.outputs, key=lambda d: d.error / d.budget if d.budget else 0.0, default=None)
            out.append(LadderStep(name, m.outputs_diverged, worst.error if worst else 0.0,
                                  worst.budget if worst else 0.0))
        out.append(LadderStep(_backends.rung_name(self.cfg.backend, self.cfg.mode), True, math.nan, math.nan,
                              "the backend under test"))
        return tuple(out)


def diff_graph(gm: torch.fx.GraphModule, inputs: Sequence[Any], cfg: DiffConfig, *, graph: str,
               call: int = 0) -> GraphDiff:
    differ = GraphDiffer(gm, inputs, cfg, graph=graph)
    result = differ.run(call)
    if cfg.training:
        from .training import diff_grads

        result = diff_grads(differ, result)
    return result


def _first_tensor(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor) and nonfinite(v)), value[0])
    return value
