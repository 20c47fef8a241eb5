"""Summary probes as Inductor reductions: the statistics are computed inside the generated kernels and
only a few scalars per value reach dynstep, so a probed value no longer has to exist in memory.

A `dynstep::probe(x, site)` call is an extern kernel: Inductor must write `x` to a buffer for it, which
breaks its fusion (a 64 MiB write and read per probed value at 16 Mi float32). For a probe whose only
action is `summary`, this pass (run on AOTAutograd's partitioned graphs, right before Inductor lowers
them) replaces the call by plain aten reductions over the value, all of which Inductor lowers itself
and fuses with the loop that computes the value (or recomputes the value inline):

    sum, sumsq  = sum(float64(where(finite, x, 0))), sum of its squares   (float64 accumulation)
    min, max    = amin(where(finite, x, +inf)), amax(where(finite, x, -inf))
    nan, bad    = sum(x != x), sum(!finite)                              (floating dtypes only)

and hands the results of a run of consecutive fused probes to one `dynstep::publish(stats, sites,
shapes, ranks, dtypes)` call, an ordered effect in the place of the run's last probe: hits keep graph
order among fused and unfused probes. dynstep.probe.fused (and csrc/probe_publish.cpp) fold the
numbers into the same `Stats` the probe kernels give. Values smaller than FUSE_MIN_NUMEL elements keep
the extern call (materialising a few KiB costs less than the extra scalars); `DYNSTEP_FUSED_STATS=0`
keeps it for every value.

    report = fuse_summaries(gm)       # gm: a partitioned forward or backward graph, before Inductor
    report.fused, report.kept
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import operator
from collections.abc import Callable, Iterator

import torch
import torch.fx

from dynstep import _compat
from dynstep.core.options import switched_off
from dynstep.core.sites import SITES, Site
from dynstep.ops import schema as ops
from dynstep.probe import fused

from . import kernel_counts

FUSE_MIN_NUMEL = 1 << 14      # smaller values keep the extern probe call (bench/probe_overhead.py: fused)
MAX_SITES_PER_PUBLISH = 64
log = logging.getLogger("dynstep")
aten = torch.ops.aten
prims = torch.ops.prims


@dataclasses.dataclass(frozen=True)
class FusedProbes:
    """What the pass did to one graph: sites whose statistics the kernels compute, summary probes kept
    on the extern call (with why), and how many publish calls carry the results."""

    fused: tuple[int, ...] = ()
    kept: tuple[tuple[int, str], ...] = ()
    publishes: int = 0
    shared: tuple[int, ...] = ()    # fused sites whose statistics another probe's reductions computed


def enabled() -> bool:
    return not switched_off("DYNSTEP_FUSED_STATS")


def fusable(site: Site) -> bool:
    """A probe whose statistics may be computed by the compiled kernels: summary is its only action
    (record, print, nan, checks and pauses need the value itself), placed by superstep. The one test
    of which probes are fused. An owned site (the flight recorder's: `Site.owner`) is fused with `nan`
    too: its NaN/Inf counts go to its sink, which decides (probe/runtime.py), and the fused statistics
    carry those counts."""
    if site.hand is not None or site.kind not in ("value", "grad"):
        return False
    return site.actions == ("summary",) or bool(site.owner) and set(site.actions) == {"summary", "nan"}


@dataclasses.dataclass
class _Call:
    node: torch.fx.Node
    value: torch.fx.Node
    site: int
    token: torch.fx.Node | None      # the effect token it takes (forward graphs), else None


def fuse_summaries(gm: torch.fx.GraphModule) -> FusedProbes:
    if not enabled():
        return FusedProbes()
    graph = gm.graph
    runs, kept = _runs(graph)
    fused_ids: list[int] = []
    computed: dict[torch.fx.Node, list[torch.fx.Node]] = {}   # a value's elements -> their statistics
    shared: list[int] = []
    for run in runs:
        shared += _lower_run(graph, run, computed)
        fused_ids += [c.site for c in run]
    if runs:
        graph.lint()
        gm.recompile()
    for site_id, why in kept:
        log.debug("dynstep: summary probe %d keeps the extern call: %s", site_id, why)
    return FusedProbes(tuple(fused_ids), tuple(kept), len(runs), tuple(shared))


# Ops whose result holds exactly the elements of their first argument, same dtype and count, in another
# shape or order (a view, a permutation, a copy): a probe of one has the statistics of the other (sums
# folded in another order: equal within float64 rounding), so they are computed once. Partitioned graphs
# are full of these (a linear's output viewed back to 3-d, attention heads transposed, a gradient viewed
# for the next matmul). Not here: anything that drops, repeats or converts elements (slice, expand,
# view.dtype, _to_copy).
SAME_ELEMENTS = frozenset(op for op in (
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten._reshape_alias.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.squeeze.default, aten.squeeze.dim,
    getattr(aten.squeeze, "dims", None), aten.unsqueeze.default, aten.clone.default, aten.alias.default,
    aten.detach.default) if op is not None)


def _elements_of(value: object) -> object:
    """The node that first held `value`'s elements, looking through SAME_ELEMENTS ops."""
    while isinstance(value, torch.fx.Node) and value.op == "call_function" and value.target in SAME_ELEMENTS \
            and isinstance(value.args[0], torch.fx.Node):
        value = value.args[0]
    return value


def _runs(graph: torch.fx.Graph) -> tuple[list[list[_Call]], list[tuple[int, str]]]:
    """Consecutive fusable probes among the graph's effectful calls; any other effectful call ends a run."""
    runs: list[list[_Call]] = [[]]
    kept: list[tuple[int, str]] = []
    for node in _effectful(graph):
        call = _probe_call(node)
        why = _why_not(call) if call is not None else "not a probe"
        if why is None and call is not None and len(runs[-1]) < MAX_SITES_PER_PUBLISH:
            runs[-1].append(call)
            continue
        if call is not None and why not in (None, "not a summary probe"):
            kept.append((call.site, why))
        runs.append([call] if why is None and call is not None else [])
    return [r for r in runs if r], kept


def _effectful(graph: torch.fx.Graph) -> Iterator[torch.fx.Node]:
    with_effects = _compat.with_effects_op()
    for node in graph.nodes:
        if node.op == "call_function" and (node.target is with_effects or node.is_impure(impure_random=False)):
            yield node


def _probe_call(node: torch.fx.Node) -> _Call | None:
    if node.target is ops.probe:
        value, site = node.args
        return _Call(node, value, site, None)
    if node.target is _compat.with_effects_op() and node.args[1] is ops.probe:
        token, _, value, site = node.args
        return _Call(node, value, site, token)
    return None


def _why_not(call: _Call) -> str | None:
    """None when the probe can be fused, else why not (for the graph's report)."""
    if not fusable(SITES.get(call.site)):
        return "not a summary probe"
    v = call.value.meta.get("val") if isinstance(call.value, torch.fx.Node) else None
    if not isinstance(v, torch.Tensor) or v.layout != torch.strided or v.dtype not in fused.DTYPE_CODES:
        return "not a strided tensor of a summarised dtype"
    if v.device.type not in ("cpu", "cuda"):
        return f"device {v.device.type}"
    n = v.numel()
    if isinstance(n, int) and n < FUSE_MIN_NUMEL:
        return "empty" if n == 0 else f"small ({n} < {FUSE_MIN_NUMEL} elements: the extern call is cheaper)"
    return None


def _lower_run(graph: torch.fx.Graph, run: list[_Call], computed: dict[torch.fx.Node, list[torch.fx.Node]]) -> list[int]:
    """Replace a run of probes by one publish call; returns the sites whose statistics were shared
    (`computed`: those of values whose elements an earlier probe of the graph summarised)."""
    stats: list[torch.fx.Node] = []
    shapes: list[object] = []
    shared: list[int] = []
    for call in run:
        elements = _elements_of(call.value)
        with graph.inserting_before(call.node):
            emit = _Emitter(graph, call.node)
            if isinstance(elements, torch.fx.Node) and elements in computed:
                stats += computed[elements]      # computed before this call, earlier in graph order
                shared.append(call.site)
            else:
                mine = _statistics(emit, call.value)
                if isinstance(elements, torch.fx.Node):
                    computed[elements] = mine
                stats += mine
            shapes += _shape(emit, call.value)
    last = run[-1]
    for call in run[:-1]:
        _drop(graph, call)
    v_of = [c.value.meta["val"] for c in run]
    args = (stats, [c.site for c in run], shapes, [v.dim() for v in v_of], [fused.DTYPE_CODES[v.dtype] for v in v_of])
    if last.token is None:
        last.node.target = ops.publish
        last.node.args = args
    else:   # its token, as rewired when the run's earlier probes went
        last.node.args = (last.node.args[0], ops.publish, *args)
    return shared


def _drop(graph: torch.fx.Graph, call: _Call) -> None:
    """Remove a probe call; its outgoing effect token becomes its incoming one."""
    if call.token is not None:
        token = call.node.args[0]   # as rewired when earlier probes of the run went
        for user in list(call.node.users):
            if user.target is operator.getitem:
                user.replace_all_uses_with(token)
                graph.erase_node(user)
    graph.erase_node(call.node)


class _Emitter:
    """Adds aten calls before a node, each with the fake value Inductor's passes read (meta["val"])."""

    def __init__(self, graph: torch.fx.Graph, anchor: torch.fx.Node) -> None:
        self.graph = graph
        self.meta = {k: anchor.meta[k] for k in ("stack_trace", "nn_module_stack", "seq_nr") if k in anchor.meta}
        self.fake_mode: object | None = None

    def __call__(self, op: Callable[..., object], *args: object, out: torch.dtype | None = None,
                 **kwargs: object) -> torch.fx.Node:
        node = self.graph.call_function(op, args, kwargs)
        node.meta.update(self.meta)
        fakes = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
        if self.fake_mode is None:
            self.fake_mode = _compat.fake_mode_of([f for f in fakes if isinstance(f, torch.Tensor)])
        with _compat.in_fake_mode(self.fake_mode):
            # a full reduction's value is made, not computed: no size guard on a dynamic shape
            node.meta["val"] = torch.empty((), dtype=out, device=fakes[0].device) if out else op(*fakes, **kwargs)
        return node


def _statistics(emit: _Emitter, x: torch.fx.Node) -> list[torch.fx.Node]:
    v = x.meta["val"]
    if v.dtype == torch.bool:
        x = emit(prims.convert_element_type.default, x, torch.uint8)
    # Each reduction gets its own expression from x, no node shared between two of them: a shared
    # pointwise node whose inlined expression is long (a probed value deep in a fused chain) is one
    # Inductor realizes, writing it to memory and reading it back (on an H100, float64 copies of four
    # values of the 8-op chain: about 1 GiB of traffic per call, docs/gpu-validation.md). Inductor's
    # code generation merges the repeated expressions inside a kernel again.
    if not v.is_floating_point():
        def wide() -> torch.fx.Node:
            return emit(prims.convert_element_type.default, x, torch.float64)
        return [*_sums(emit, wide), emit(aten.amin.default, x, [], out=x.meta["val"].dtype),
                emit(aten.amax.default, x, [], out=x.meta["val"].dtype)]

    def finite() -> torch.fx.Node:
        return emit(aten.lt.Scalar, emit(aten.abs.default, x), math.inf)

    def kept(fill: float) -> torch.fx.Node:
        return emit(aten.where.self, finite(), x, _full(emit, v, fill))

    def wide_kept() -> torch.fx.Node:
        return emit(prims.convert_element_type.default, kept(0.0), torch.float64)

    lo = emit(aten.amin.default, kept(math.inf), [], out=v.dtype)
    hi = emit(aten.amax.default, kept(-math.inf), [], out=v.dtype)
    # int32 counts vectorise twice as wide on CPU; CUDA's publish reads int64 (csrc/cuda/probe_cuda.cu)
    count = torch.int32 if v.device.type == "cpu" and isinstance(v.numel(), int) and v.numel() < 2 ** 31 \
        else torch.int64
    nans = emit(prims.convert_element_type.default, emit(aten.ne.Tensor, x, x), count)
    bad = emit(prims.convert_element_type.default, emit(aten.logical_not.default, finite()), count)
    return [*_sums(emit, wide_kept), lo, hi,
            emit(aten.sum.default, nans, dtype=count, out=count), emit(aten.sum.default, bad, dtype=count, out=count)]


def _sums(emit: _Emitter, wide: Callable[[], torch.fx.Node]) -> list[torch.fx.Node]:
    """The sum and the sum of squares, each of its own float64 value (`wide()` makes one)."""
    f64 = torch.float64
    square = wide()
    return [emit(aten.sum.default, wide(), out=f64), emit(aten.sum.default, emit(aten.mul.Tensor, square, square), out=f64)]


def _full(emit: _Emitter, v: torch.Tensor, value: float) -> torch.fx.Node:
    return emit(aten.full.default, [], value, dtype=v.dtype, device=v.device, pin_memory=False)


def _shape(emit: _Emitter, x: torch.fx.Node) -> list[object]:
    """The value's sizes: ints, or a sym_size node for each dynamic one."""
    return [s if isinstance(s, int) else emit(aten.sym_size.int, x, d) for d, s in enumerate(x.meta["val"].shape)]


class Lowering:
    """The pass and the kernel count on each partitioned graph of one superstep compile under Inductor:
    `rewrite` runs after the probe pass's own rewrite, `around` wraps Inductor's compile of the result."""

    def __init__(self, graph_id: str) -> None:
        self.reports: dict[bool, FusedProbes] = {}
        self.counter = kernel_counts.KernelCounter(graph_id)

    def rewrite(self, gm: torch.fx.GraphModule, is_backward: bool) -> torch.fx.GraphModule:
        self.reports[is_backward] = fuse_summaries(gm)
        return gm

    @contextlib.contextmanager
    def around(self, gm: torch.fx.GraphModule, is_backward: bool) -> Iterator[kernel_counts.Slot]:
        report = self.reports.get(is_backward, FusedProbes())
        extra = sum(fused.parts_per_site(c) for c in _dtype_codes(gm))
        with _compat.fusion_limits(extra), self.counter.around(gm, is_backward, fused=len(report.fused)) as slot:
            yield slot


def _dtype_codes(gm: torch.fx.GraphModule) -> list[int]:
    """The dtype code of every value whose statistics a publish call in `gm` carries."""
    out: list[int] = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is ops.publish:
            out += node.args[4]
        elif node.op == "call_function" and node.target is _compat.with_effects_op() and node.args[1] is ops.publish:
            out += node.args[6]
    return out
