"""The engine API of mixed-mode debugging: at a stop, which native code computes the stopped node.

The compiled program that is running is found on the Python stack of the stop: an Inductor
wrapper's `call` (its graph's provenance was kept by `provenance.tracking()`), or the forward of
an FX GraphModule (AOTAutograd's aten graph under aot_eager, Dynamo's graph under eager). So the
answer is about the very variant and graph that stopped, never a same-named node of another graph.

    report = native_report(stop.site, device="cpu")            # on the stopped thread
    report = native_report(site, frame=sys._current_frames()[tid])   # from another thread (a DAP server)
    report.kernels, report.problems, report.targets()
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from types import FrameType

import torch.fx

from ..core.sites import SITES, Site
from . import fxgraphs, inductor
from .provenance import REGISTRY, InductorGraph, is_tracking
from .findings import NativeKernel, NativeReport

UNTRACKED = ("this graph was compiled without Inductor's provenance, so its kernels cannot be told apart; "
             "start the script with `dynstep gdb ...` or `dynstep run --native ...` (or set INDUCTOR_PROVENANCE=1) "
             "so graphs are compiled with it")


def native_report(site: Site, *, frame: FrameType | None = None, device: str = "cpu") -> NativeReport:
    """What computes `site.node` in the compiled program on `frame`'s stack (default: the caller's)."""
    key = "CUDA" if device.startswith("cuda") else "CPU"
    base = NativeReport(node=site.node, target=site.target, module=site.module, source=site.source,
                        source_text=site.source_text, graph=site.graph, compiler="")
    start = frame if frame is not None else inspect.currentframe()
    for f in _frames(start):
        graph = REGISTRY.by_wrapper(f.f_code.co_filename)
        if graph is not None:
            return _inductor_report(base, graph, site, key)
        if f.f_code.co_name == "call" and "async_compile" in f.f_globals:
            return _replace(base, compiler="inductor", problems=(UNTRACKED,))
        # an FX GraphModule's generated forward (torch/fx/graph_module.py names its code <eval_with_key>.N)
        owner = f.f_locals.get("self") if f.f_code.co_filename.startswith("<eval_with_key>") else None
        if isinstance(owner, torch.fx.GraphModule):
            kernels, problems = fxgraphs.node_kernels(owner, f.f_code, site.node, key)
            aot = any(n.meta.get("from_node") for n in owner.graph.nodes)
            return _replace(base, compiler="aot_eager" if aot else "eager", kernels=kernels, problems=problems)
    why = "no compiled graph is running on this thread's stack (native needs a stop inside a compiled graph)"
    return _replace(base, problems=(why + ("" if is_tracking() else "; " + UNTRACKED),))


def _frames(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _inductor_report(base: NativeReport, graph: InductorGraph, site: Site, key: str) -> NativeReport:
    kernels = _kernels(graph, site, key)
    views: tuple[str, ...] = ()
    if not kernels and site.node in graph.views:    # HF MLPs return views: name the kernel that wrote the buffer
        views = _viewed(graph, site)
        if views:
            site = dataclasses.replace(site, node=views[-1])
            kernels = _kernels(graph, site, key)
    others: tuple[NativeKernel, ...] = ()
    for sibling in REGISTRY.siblings(graph):
        others += _kernels(sibling, site, key)
    problems = tuple(k.problem for k in kernels if k.problem)
    if not kernels:
        problems = (_why_no_kernel(graph, site),) + problems
    return _replace(base, compiler="inductor", kernels=kernels, other_variant=others, problems=problems, views=views)


# torch-level ops that return an alias of their first input (Tensor.view, torch.reshape, ...): Inductor
# may keep no post-grad node of their own, so its provenance alone does not call them views
_ALIASING = frozenset({"view", "reshape", "permute", "transpose", "t", "expand", "expand_as", "unsqueeze",
                       "squeeze", "flatten", "unflatten", "view_as", "reshape_as", "contiguous", "narrow", "select",
                       "detach", "as_strided", "movedim", "swapaxes", "swapdims", "dropout"})


def _viewed(graph: InductorGraph, site: Site) -> tuple[str, ...]:
    """The nodes a view node aliases, nearest first, up to the first one a kernel computes (its
    buffer's writer), or () when the chain leaves what the graph's stop points know. A view's base is
    its first tensor input (`x.view(...)`, `x.transpose(...)`); each node of a graph with stop points
    has a site listing its inputs."""
    chain: list[str] = []
    current: Site | None = site
    while current is not None and current.inputs and len(chain) < 32 and \
            (current.node in graph.views or current.target.rsplit(".", 1)[-1] in _ALIASING):
        base = current.inputs[0]
        chain.append(base)
        if graph.kernels_for(base):
            return tuple(chain)
        current = next((s for s in SITES.all() if s.kind == "pause" and s.graph == site.graph and s.node == base),
                       None)
    return ()


def _kernels(graph: InductorGraph, site: Site, key: str) -> tuple[NativeKernel, ...]:
    entries = graph.kernels_for(site.node)
    if not entries and graph.is_backward and site.source:
        entries = _by_source_line(graph, site.source)
    return tuple(inductor.resolve(graph, e, key) for e in entries)


def _by_source_line(graph: InductorGraph, source: str) -> tuple:
    """Backward graphs carry no node mapping, only each kernel's user stack traces."""
    file, _, line = source.rpartition(":")
    needle = f'{file.rsplit("/", 1)[-1]}", line {line}'
    return tuple(k for k in graph.kernels if any(needle in t for t in k.traces)
                 and not k.name.startswith("torch.ops.dynstep."))


def _why_no_kernel(graph: InductorGraph, site: Site) -> str:
    node = site.node
    if node not in graph.nodes:
        return (f"node {node} is not in Inductor's provenance for this graph: it was folded into a constant "
                "or removed, so no kernel computes it")
    if node in graph.views:
        readers = ", ".join(dict.fromkeys(k.name for k in graph.readers_of(node))) or "its users' kernels"
        return (f"node {node} is a view (it aliases another node's buffer): no kernel computes it; {readers} "
                "read it. Stop at the node it views (`native` there) to break where the data is made")
    return (f"node {node} has no kernel of its own: Inductor fused it into its users' kernels or computed it "
            "at compile time; try `native` at a node that uses it")


def _replace(report: NativeReport, **changes: object) -> NativeReport:
    return dataclasses.replace(report, **changes)
