"""The diff engine: compare one compiled graph call with eager and float64, and bisect.

Order of work for one graph call (the observer effect decides it: every probe is a graph
output that the compiler must materialise, which can change what it fuses):

1. compile the graph as is and compare its outputs only;
2. if they diverge, bisect on execution order: probe only the values that cross the cut after
   the first half, keep the half where the divergence starts, until one node is left;
3. confirm that node with its inputs probed and rerun it eagerly on the *compiled* inputs, so
   an error it merely inherits is told apart from its own; a divergence that vanishes once
   probed is reported as fusion-dependent instead of naming a wrong node;
4. NaN/Inf origin (eager from the reference run, compiled by the same bisection) and the
   backends ladder (which stage first reproduces the divergence).

    cfg = DiffConfig(backend="inductor")
    gd = diff_graph(gm, inputs, cfg, graph="forward[0/0]", call=0)     # -> GraphDiff

Memory: the reference run drops values after their last use; only probed values are kept.
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
from .. import graphinfo as gi
from ..errors import DynstepError
from . import _backends
from .kernels import kernel_for
from .judge import Metrics, Reference, Tolerance, call_node, fetch_attr, judge, nonfinite, to_fp64
from .probed import ProbedRun, output_nodes
from .report import GraphDiff, LadderStep, NanOrigin, NodeDiff

CALLS = ("call_function", "call_method", "call_module")
Progress = Callable[[str, int, int], None]


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


@dataclasses.dataclass
class Measured:
    """What one compiled run showed, judged against one reference run."""

    outputs: list[NodeDiff]
    values: dict[torch.fx.Node, NodeDiff]
    compiled: dict[torch.fx.Node, Any]
    nan_eager: NanOrigin | None
    raw: list[Any]

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
        self.total = 2 + max(1, math.ceil(math.log2(max(2, len(self.order)))))

    # -- running -------------------------------------------------------------------------
    def tick(self, what: str) -> None:
        self.steps += 1
        if self.cfg.progress is not None:
            self.cfg.progress(what, self.steps, max(self.total, self.steps))

    def measure(self, probes: Sequence[torch.fx.Node] = (), backend: Any = None) -> Measured:
        backend = backend or self.cfg.backend
        try:
            run = ProbedRun.compile(self.gm, self.inputs, backend, probes=probes, mode=self.cfg.mode)
        except Exception as exc:
            raise DynstepError(
                f"dynstep diff: backend {_backends.backend_name(backend)!r} failed to compile graph "
                f"{self.graph} with {len(probes)} probed value(s) ({[p.name for p in probes][:5]}): {exc!r}. "
                "Diff with a backend that compiles this graph, or report the compile failure itself."
            ) from exc
        self.compiles += 1
        outputs, compiled = run(self.inputs)
        return self.judge_run(outputs, compiled)

    def judge_run(self, outputs: list[Any], compiled: dict[torch.fx.Node, Any]) -> Measured:
        out_nodes = output_nodes(self.gm)
        out_at = {}
        for i, n in enumerate(out_nodes):
            if isinstance(n, torch.fx.Node):
                out_at.setdefault(n, i)
        out_diffs: list[NodeDiff] = []
        values: dict[torch.fx.Node, NodeDiff] = {}
        nan_eager = None
        reference = Reference(self.gm, self.inputs, keep=lambda n: n in compiled or n in out_at)
        with torch.no_grad():
            for step in reference:
                node = step.node
                if node in compiled:
                    values[node] = self._diff(node, compiled[node], step.eager, step.fp64, "value")
                if node in out_at:
                    out_diffs.append(self._diff(node, outputs[out_at[node]], step.eager, step.fp64, "output"))
        if reference.nan_origin is not None:
            node, value = reference.nan_origin
            nan_eager = NanOrigin.of("eager", node, _first_tensor(value), order=self.pos[node], graph=self.graph)
        for d in list(values.values()) + out_diffs:
            self.seen[d.node] = d
        return Measured(out_diffs, values, compiled, nan_eager, outputs)

    def _diff(self, node: torch.fx.Node, compiled: Any, eager: Any, fp64: Any, kind: str,
              own: bool | None = None) -> NodeDiff:
        m, value = judge_value(compiled, eager, fp64, self.cfg.tol)
        return NodeDiff.of(node, value, m, order=self.pos.get(node, -1), graph=self.graph, kind=kind, own=own)

    def kernel(self, node: torch.fx.Node) -> str:
        """The generated kernel that computed `node` in the unprobed compile, when known."""
        return kernel_for(self.codes, node.name, gi.op_name(node))

    # -- bisection -----------------------------------------------------------------------
    def cut(self, p: int) -> list[torch.fx.Node]:
        """The values computed by the first `p` nodes that later nodes or the outputs read."""
        prefix = set(self.order[:p])
        return [n for n in self.order[:p] if _is_tensorish(n) and any(u not in prefix for u in n.users)]

    def bisect(self, bad: Callable[[Measured, list[torch.fx.Node]], bool], label: str) -> tuple[int, bool]:
        """Smallest p whose cut is bad (assuming the outputs are). Also: did any probed run
        show clean outputs (the divergence vanished under probing)?"""
        lo, hi, vanished = 0, len(self.order), False
        while hi - lo > 1:
            mid = (lo + hi) // 2
            probes = self.cut(mid)
            if not probes:  # nothing computed so far is read later: no divergence can start here
                lo = mid
                continue
            self.tick(f"{label}: probing {len(probes)} value(s) after node {mid}/{len(self.order)}")
            m = self.measure(probes)
            vanished |= not bad(m, [])
            if bad(m, probes):
                hi = mid
            else:
                lo = mid
        return hi, vanished

    def confirm(self, node: torch.fx.Node) -> tuple[Measured, Metrics | None]:
        """Probe `node` and its inputs; rerun it eagerly and in fp64 on the compiled inputs."""
        args = [a for a in node.all_input_nodes if a.op in CALLS and _is_tensorish(a)]
        m = self.measure([*args, node])
        return m, self.local(node, m.compiled)

    def local(self, node: torch.fx.Node, compiled: dict[torch.fx.Node, Any]) -> Metrics | None:
        if node not in compiled:
            return None
        env = {p: v for p, v in zip([n for n in self.gm.graph.nodes if n.op == "placeholder"], self.inputs)}

        def value(a: torch.fx.Node) -> Any:
            if a in compiled:
                return compiled[a]
            if a in env:
                return env[a]
            if a.op == "get_attr":
                return fetch_attr(self.gm, a.target)
            raise KeyError(a.name)

        try:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), value)
        except KeyError:
            return None
        with torch.no_grad():
            eager = call_node(node, self.gm, args, kwargs, fp64=False)
            try:
                ref64 = call_node(node, self.gm, to_fp64(args), to_fp64(kwargs), fp64=True)
            except (RuntimeError, TypeError, NotImplementedError):
                ref64 = None
        return judge_value(compiled[node], eager, ref64, self.cfg.tol)[0]

    def dense_first(self, upto: int) -> NodeDiff | None:
        """Fallback when bisection was misled: probe every node up to `upto` at once and
        return the first whose own (locally rerun) error diverges."""
        probes = [n for n in self.order[:upto] if _is_tensorish(n)]
        self.tick(f"dense scan of {len(probes)} values")
        m = self.measure(probes)
        for n in probes:
            loc = self.local(n, m.compiled)
            if loc is not None and loc.diverged and n in m.values:
                return dataclasses.replace(m.values[n], own=True, kernel=self.kernel(n))
        return None

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
        if _outputs_nonfinite(base):
            nan_compiled = self.find_nan(first)
        ladder = self.run_ladder() if self.cfg.ladder and base.outputs_diverged else ()
        repro = ""
        if first is not None and self.cfg.repro_dir:
            from .repro import write_repro

            node = next(n for n in self.order if n.name == first.node)
            repro = write_repro(self, node, self.cfg.repro_dir)
        nodes = tuple(sorted(self.seen.values(), key=lambda d: d.order))
        return GraphDiff(graph=self.graph, call=call, backend=_backends.backend_name(self.cfg.backend),
                         ok=not base.outputs_diverged, outputs=tuple(base.outputs), nodes=nodes,
                         first_divergence=first, fusion_dependent=fusion, nan_eager=base.nan_eager,
                         nan_compiled=nan_compiled, ladder=ladder, compiles=self.compiles,
                         seconds=time.perf_counter() - t0, notes=tuple(self.notes), repro=repro)

    def find_first(self) -> tuple[NodeDiff | None, bool]:
        p, vanished = self.bisect(lambda m, probes: any(m.values[n].diverged for n in probes if n in m.values)
                                  or (not probes and m.outputs_diverged), "divergence")
        node = self.order[p - 1]
        self.tick(f"confirming {node.name}")
        m, loc = self.confirm(node)
        if loc is not None and loc.diverged and node in m.values:
            return dataclasses.replace(m.values[node], own=True, diverged=True,
                                       kernel=self.kernel(node)), False
        found = self.dense_first(p)
        if found is not None:
            self.notes.append(f"bisection pointed at {node.name}, which only inherits its error; "
                              f"a dense scan found {found.node}")
            return found, False
        if not m.outputs_diverged or vanished:
            self.notes.append("the outputs diverge when only the outputs are probed, but not once "
                              "intermediate values are probed: a fusion-dependent divergence")
            return None, True
        self.notes.append(f"no single node's own error explains the output divergence (last checked: {node.name})")
        return None, False

    def find_nan(self, first: NodeDiff | None) -> NanOrigin | None:
        if first is not None and first.new_nonfinite:
            node = next(n for n in self.order if n.name == first.node)
            value = self._compiled_of(node)
            if value is not None:
                return NanOrigin.of("compiled", node, _first_tensor(value), order=self.pos[node], graph=self.graph)
        p, _ = self.bisect(lambda m, probes: any(nonfinite(m.compiled[n]) for n in probes if n in m.compiled)
                           or (not probes and _outputs_nonfinite(m)), "nan origin")
        for node in self.order[max(0, p - 1):p + 2]:  # the cut may also hold a value computed just after
            m, _ = self.confirm(node)
            args = [a for a in node.all_input_nodes if a in m.compiled]
            value = m.compiled.get(node)
            if value is not None and nonfinite(value) and not any(nonfinite(m.compiled[a]) for a in args):
                return NanOrigin.of("compiled", node, _first_tensor(value), order=self.pos[node], graph=self.graph)
            if value is not None and nonfinite(value):
                break
        return None

    def _compiled_of(self, node: torch.fx.Node) -> Any:
        m = self.measure([node])
        return m.compiled.get(node)

    def run_ladder(self) -> tuple[LadderStep, ...]:
        rungs = [b for b in _backends.LADDER if b != "eager" and b != self.cfg.backend]
        out = []
        for name in rungs:
            self.tick(f"ladder: {name}")
            try:
                m = self.measure(backend=name)
            except Exception as exc:  # a rung that cannot compile this graph is reported, not fatal
                out.append(LadderStep(name, False, math.nan, math.nan, f"could not compile: {exc!r}"[:200]))
                continue
            worst = max(m.outputs, key=lambda d: d.error / d.budget if d.budget else 0.0, default=None)
            out.append(LadderStep(name, m.outputs_diverged, worst.error if worst else 0.0,
                                  worst.budget if worst else 0.0))
        out.append(LadderStep(_backends.backend_name(self.cfg.backend), True, math.nan, math.nan,
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


def judge_value(compiled: Any, eager: Any, fp64: Any, tol: Tolerance) -> tuple[Metrics, Any]:
    """Judge a tensor, or a tuple of tensors by its worst element. Returns (metrics, value)."""
    if isinstance(compiled, torch.Tensor):
        return judge(compiled, eager, fp64 if isinstance(fp64, torch.Tensor) else None, tol), compiled
    if isinstance(compiled, (tuple, list)):
        best = None
        for i, c in enumerate(compiled):
            if not isinstance(c, torch.Tensor):
                continue
            f = fp64[i] if isinstance(fp64, (tuple, list)) else None
            m = judge(c, eager[i], f, tol)
            if best is None or (m.diverged, m.error) > (best[0].diverged, best[0].error):
                best = (m, c)
        if best is not None:
            return best
    same = compiled == eager
    return Metrics(not bool(same), 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0), compiled


def _is_tensorish(node: torch.fx.Node) -> bool:
    value = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and bool(value) and all(isinstance(v, torch.Tensor) for v in value)


def _first_tensor(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor) and nonfinite(v)), value[0])
    return value


def _outputs_nonfinite(m: Measured) -> bool:
    return any(nonfinite(v) for v in m.raw)
