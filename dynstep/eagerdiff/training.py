"""Gradients: diff the backward of a graph and name the forward node a bad gradient belongs to.

Gradients of intermediate values are observed with *zero taps*: the graph copy gets one extra
input `z` per tapped value and computes `value + z` in its place, so d(loss)/dz is exactly the
gradient flowing into that value, under any backend (eager, aot_eager, Inductor), and the
gradients of the graph's own inputs (the parameters) come for free. The same cotangent
(seeded) is used for eager, float64 and compiled.

The backward runs in reverse: the divergent tapped gradient latest in forward order is where
the error appears first; the forward node whose backward produced it is the user of that value
whose own output gradient is still clean.

    gd = diff_grads(differ, gd)       # adds gd.grads and gd.grad_divergence
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from . import _backends
from .judge import judge
from .report import GraphDiff, NodeDiff

SEED = 1234


def _requires_grad(node: torch.fx.Node) -> bool:
    value = node.meta.get("example_value", node.meta.get("val"))
    return isinstance(value, torch.Tensor) and value.is_floating_point() and bool(value.requires_grad)


def tapped(gm: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node]) -> torch.fx.GraphModule:
    """A copy of `gm` taking one extra input per node in `nodes`, added to that node's value."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    out = graph.graph_copy(gm.graph, env)
    last_ph = [n for n in graph.nodes if n.op == "placeholder"][-1]
    zs = []
    with graph.inserting_after(last_ph):
        for node in reversed(nodes):
            zs.append(graph.placeholder(f"dynstep_tap_{node.name}"))
    for node, z in zip(nodes, reversed(zs)):
        new = env[node]
        with graph.inserting_after(new):
            add = graph.call_function(operator.add, (new, z))
        add.meta.update(new.meta)
        new.replace_all_uses_with(add, delete_user_cb=lambda u: u is not add)
        out = torch.fx.node.map_arg(out, lambda a: add if a is new else a)
    graph.output(out)
    graph.lint()
    return torch.fx.GraphModule(gm, graph)


def _grads(fn: Any, inputs: list[Any], leaves: list[int], taps: list[torch.Tensor], dtype=None) -> list[Any]:
    def prep(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        x = x.detach()
        return x.to(dtype) if dtype is not None and x.is_floating_point() else x

    args = [prep(x) for x in inputs]
    for i in leaves:
        args[i] = args[i].clone().requires_grad_(True)
    zs = [prep(z).clone().requires_grad_(True) for z in taps]
    with torch.enable_grad():
        outs = fn(*args, *zs)
        outs = [o for o in (outs if isinstance(outs, (tuple, list)) else [outs])
                if isinstance(o, torch.Tensor) and o.requires_grad]
        gen = torch.Generator().manual_seed(SEED)
        cots = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.dtype) for o in outs]
        wrt = [args[i] for i in leaves] + zs
        grads = torch.autograd.grad(outs, wrt, cots, allow_unused=True)
    return [None if g is None else g.detach() for g in grads]


def diff_grads(differ: Any, result: GraphDiff) -> GraphDiff:
    gm, inputs, cfg = differ.gm, differ.inputs, differ.cfg
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    leaves = [i for i, x in enumerate(inputs)
              if isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad]
    if not leaves:
        return dataclasses.replace(result, notes=result.notes + ("training: no graph input requires grad",))
    nodes = [n for n in differ.order if _requires_grad(n) and not _is_static_shape_less(n)]
    taps = [torch.zeros(tuple(n.meta.get("example_value", n.meta.get("val")).shape)) for n in nodes]
    tgm = tapped(gm, nodes)
    differ.tick("training: gradients (eager, float64, compiled)")
    eager = _grads(tgm, inputs, leaves, taps)
    try:
        ref64 = _grads(tgm, inputs, leaves, taps, dtype=torch.float64)
    except (RuntimeError, TypeError, NotImplementedError):
        ref64 = [None] * len(eager)
    # AOTAutograd builds a backward only for inputs that require grad
    example = [x.detach().requires_grad_(i in leaves) if isinstance(x, torch.Tensor) else x
               for i, x in enumerate(inputs)] + [z.clone().requires_grad_(True) for z in taps]
    compiled_fn = _backends.compile_graph(tgm, example, cfg.backend, mode=cfg.mode, options=cfg.options)
    compiled = _grads(compiled_fn, inputs, leaves, taps)
    targets = [placeholders[i] for i in leaves] + nodes
    diffs: list[NodeDiff] = []
    for node, c, e, f in zip(targets, compiled, eager, ref64):
        if c is None or e is None:
            continue
        m = judge(c, e, f, cfg.tol)
        diffs.append(NodeDiff.of(node, c, m, order=differ.pos.get(node, -1), graph=differ.graph, kind="grad",
                                 tol=differ.cfg.tol))
    by_name = {d.node: d for d in diffs}
    culprit = attribute(differ, result, by_name, targets)
    bad = any(d.diverged for d in diffs)
    return dataclasses.replace(result, ok=result.ok and not bad, grads=tuple(diffs), grad_divergence=culprit,
                               compiles=result.compiles + 1)


def attribute(differ: Any, result: GraphDiff, grads: dict[str, NodeDiff],
              targets: Sequence[torch.fx.Node]) -> NodeDiff | None:
    """The forward node whose backward first produces a divergent gradient, as a NodeDiff of
    the gradient it got wrong (with the forward node's name, op, module and source line)."""
    bad = [n for n in targets if n.name in grads and grads[n.name].diverged]
    if not bad:
        return None
    if result.first_divergence is not None:
        return result.first_divergence  # a wrong forward value explains its gradients
    inner = [n for n in bad if n.op != "placeholder"]
    start = max(inner, key=lambda n: differ.pos[n]) if inner else bad[0]
    clean_users = [u for u in start.users if u.op != "output"
                   and not (u.name in grads and grads[u.name].diverged)]
    culprit = max(clean_users, key=lambda u: differ.pos.get(u, -1)) if clean_users else start
    g = grads[start.name]
    src = NodeDiff.of(culprit, torch.empty(g.shape), _as_metrics(g), order=differ.pos.get(culprit, -1),
                      graph=differ.graph, kind="grad", own=True)
    return dataclasses.replace(src, shape=g.shape, dtype=g.dtype, verdict=g.verdict)


def _as_metrics(d: NodeDiff):
    from .judge import Metrics

    return Metrics(d.diverged, d.error, d.ref_error, d.budget, d.max_abs, d.max_rel, d.cosine, d.new_nonfinite)


def _is_static_shape_less(node: torch.fx.Node) -> bool:
    value = node.meta.get("example_value", node.meta.get("val"))
    return not all(isinstance(s, int) for s in value.shape)
