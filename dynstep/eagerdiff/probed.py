"""Probed copies of a graph: the same FX graph, with chosen values added to its outputs.

Making a value a graph output is the least intrusive probe that every inner compiler honours:
the compiler must materialise it, which can change what it fuses (the observer effect the
engine's search is designed around). The original graph is never modified.

    run = ProbedRun.compile(gm, inputs, backend, probes=[node_a, node_b], mode=None)
    outputs, values = run(inputs)         # values[node_a] is the compiled value of node_a
    _, values = run(inputs, keep=[node_b], outputs=False)   # run again, keep only node_b
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
import torch.fx

from .. import _compat
from . import _backends
from .judge import mutated_later


def copy_graph(gm: torch.fx.GraphModule) -> tuple[torch.fx.Graph, dict[torch.fx.Node, torch.fx.Node], Any]:
    """A copy of the graph without its output node, the node map, and the copied output value."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    out = graph.graph_copy(gm.graph, env)
    return graph, env, out


def fresh_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The same module and attributes over a copy of the graph (a compiler may rewrite the one it gets)."""
    graph, _, out = copy_graph(gm)
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


def output_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node | Any]:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return _compat.tree_leaves(output.args[0])


def is_tensorish(node: torch.fx.Node) -> bool:
    """Whether the node's value is a tensor or a non-empty tuple of tensors (what can be probed)."""
    value = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and bool(value) and all(isinstance(v, torch.Tensor) for v in value)


def with_outputs(gm: torch.fx.GraphModule, probes: Sequence[torch.fx.Node]) -> tuple[torch.fx.GraphModule, list]:
    """A new GraphModule returning (original outputs flattened..., probed values...).

    Returns it and, per probe, how to read its value back: (start, count, is_tuple).
    """
    graph, env, out = copy_graph(gm)
    flat = _compat.tree_leaves(out)
    extra: list[torch.fx.Node] = []
    layout = []
    overwritten = mutated_later(gm.graph)
    for node in probes:
        new = env[node]
        value = node.meta.get("example_value", node.meta.get("val"))
        if node in overwritten and isinstance(value, torch.Tensor):   # the value as computed, not as overwritten
            with graph.inserting_after(new):
                new = graph.call_function(torch.clone, (new,))
        if isinstance(value, (tuple, list)):
            items = [graph.call_function(operator.getitem, (new, i)) for i in range(len(value))]
            layout.append((len(flat) + len(extra), len(items), True))
            extra += items
        else:
            layout.append((len(flat) + len(extra), 1, False))
            extra.append(new)
    graph.output(tuple(flat) + tuple(extra))
    graph.lint()
    return torch.fx.GraphModule(gm, graph), layout


@dataclasses.dataclass
class ProbedRun:
    """A compiled probed copy of a graph and how to split what it returns."""

    fn: Callable[..., Any]
    probes: tuple[torch.fx.Node, ...]
    layout: list
    n_outputs: int

    @classmethod
    def compile(cls, gm: torch.fx.GraphModule, inputs: Sequence[Any], backend: Any, *,
                probes: Sequence[torch.fx.Node] = (), mode: str | None = None,
                options: dict[str, Any] | None = None) -> "ProbedRun":
        probed, layout = with_outputs(gm, probes)
        with torch.no_grad():  # probed copies only run forward: AOTAutograd then builds no backward
            fn = _backends.compile_graph(probed, list(inputs), backend, mode=mode, options=options)
        return cls(fn, tuple(probes), layout, len(output_nodes(gm)))

    def __call__(self, inputs: Sequence[Any], keep: Collection[torch.fx.Node] | None = None, *,
                 outputs: bool = True) -> tuple[list[Any], dict[torch.fx.Node, Any]]:
        """Run once: (the graph's outputs, or [] unless `outputs`; the probed values in `keep`,
        or all). What is not asked for is dropped as soon as the call returns."""
        with torch.no_grad():
            result = self.fn(*inputs)
        result = list(result) if isinstance(result, (tuple, list)) else [result]
        values: dict[torch.fx.Node, Any] = {}
        for node, (start, count, is_tuple) in zip(self.probes, self.layout):
            if keep is None or node in keep:
                values[node] = tuple(result[start:start + count]) if is_tuple else result[start]
        return (result[:self.n_outputs] if outputs else []), values
