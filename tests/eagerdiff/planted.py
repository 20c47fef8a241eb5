"""Deliberately wrong inner backends (like torch's `*_TESTING_ONLY` backends) for the diff tests.

Each rewrites the Dynamo graph it is given at one planted node, chosen by op and module path,
then runs it eagerly (or hands it to `aot_eager`), so the tests know exactly where the bug is.

    backend = swap_op("torch.nn.functional.gelu", "blocks.1.mlp", torch.relu)
"""

from __future__ import annotations

import torch
import torch.fx

from dynstep.graph import info as gi


def _planted(gm: torch.fx.GraphModule, op: str, module: str) -> torch.fx.Node:
    for node in gm.graph.nodes:
        if gi.is_value_node(node) and gi.op_name(node) == op and gi.module_path(node) == module:
            return node
    raise LookupError(f"no {op} in {module}")


def _rewrite(kind: str, op: str, module: str, make, inner: str = "eager"):
    def backend(gm: torch.fx.GraphModule, example_inputs):
        from dynstep.compilers.inner import compile_plain

        try:
            node = _planted(gm, op, module)
        except LookupError:  # the planted op is not in this (sub)graph: compile it faithfully
            return compile_plain(gm, example_inputs, inner, mode=None)
        make(gm.graph, node)
        gm.graph.lint()
        gm.recompile()
        return compile_plain(gm, example_inputs, inner, mode=None)

    backend.__name__ = f"{kind}_{module.replace('.', '_')}_TESTING_ONLY"
    return backend


def _after(graph: torch.fx.Graph, node: torch.fx.Node, fn, *extra) -> None:
    with graph.inserting_after(node):
        new = graph.call_function(fn, (node, *extra))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new, delete_user_cb=lambda u: u is not new)


def perturb(op: str, module: str, eps: float = 1e-3, inner: str = "eager"):
    """Add `eps` to the output of the planted node."""
    return _rewrite("perturb", op, module, lambda g, n: _after(g, n, torch.add, eps), inner)


def scale(op: str, module: str, factor: float = 1.01, inner: str = "eager"):
    """Multiply the output of the planted node by `factor` (a constant folded wrongly)."""
    return _rewrite("scale", op, module, lambda g, n: _after(g, n, torch.mul, factor), inner)


def swap_op(op: str, module: str, replacement, inner: str = "eager"):
    """Call `replacement` instead of the planted node's op (e.g. gelu -> relu)."""
    def make(graph, node):
        node.target = replacement
        node.kwargs = {}
    return _rewrite("swap", op, module, make, inner)


def _to_bf16_and_back(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(x.dtype)


def lower_precision(op: str, module: str, inner: str = "eager"):
    """Round the planted node's output through bfloat16 (a dropped upcast)."""
    return _rewrite("bf16", op, module, lambda g, n: _after(g, n, _to_bf16_and_back), inner)


def _poison(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    out.view(-1)[0] = float("nan")
    return out


def plant_nan(op: str, module: str, inner: str = "eager"):
    """Make one element of the planted node's output NaN."""
    return _rewrite("nan", op, module, lambda g, n: _after(g, n, _poison), inner)


def perturb_nth(index: int, eps: float = 1e-2, inner: str = "eager"):
    """Add `eps` to the output of the index-th op in execution order (for graphs of one repeated op)."""
    def backend(gm: torch.fx.GraphModule, example_inputs):
        from dynstep.compilers.inner import compile_plain

        node = [n for n in gm.graph.nodes if gi.is_value_node(n)][index]
        _after(gm.graph, node, torch.add, eps)
        gm.graph.lint()
        gm.recompile()
        return compile_plain(gm, example_inputs, inner, mode=None)

    backend.__name__ = f"perturb_op{index}_TESTING_ONLY"
    return backend


def perturb_unprobed(eps: float = 1e-2, inner: str = "eager"):
    """Add `eps` to the last op's output, but only in a graph with one output: the bug vanishes as
    soon as any value is probed (a stand-in for a fusion-dependent miscompile)."""
    def backend(gm: torch.fx.GraphModule, example_inputs):
        from dynstep.compilers.inner import compile_plain

        output = next(n for n in gm.graph.nodes if n.op == "output")
        flat = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
        if len(flat) == 1:
            _after(gm.graph, [n for n in gm.graph.nodes if gi.is_value_node(n)][-1], torch.add, eps)
            gm.graph.lint()
            gm.recompile()
        return compile_plain(gm, example_inputs, inner, mode=None)

    backend.__name__ = "perturb_unprobed_TESTING_ONLY"
    return backend
