"""Bugs planted inside Inductor itself (not a wrapping backend), for the root-cause tests: a wrong
lowering, a post-grad pass that rewrites one pattern wrongly, a wrong decomposition. Each is a
context manager that restores Inductor on exit, and turns Inductor's caches off meanwhile (their
keys do not cover a patched lowering or decomposition table: a graph compiled before, or after,
would be served the other's code).

    with wrong_lowering(aten.tanh.default, 0.01):
        report = dynstep.diff(model, x, backend="inductor")
"""

from __future__ import annotations

import contextlib

import torch
import torch._inductor.config as inductor_config
from torch._inductor import decomposition, lowering
from torch._inductor.compile_fx import select_decomp_table
from torch._inductor.custom_graph_pass import CustomGraphPass

aten = torch.ops.aten


@contextlib.contextmanager
def wrong_lowering(op=aten.tanh.default, eps: float = 0.01):
    """Inductor lowers `op` to op(x) + eps."""
    original = lowering.lowerings[op]
    lowering.lowerings[op] = lambda *args, **kwargs: lowering.lowerings[aten.add.Tensor](original(*args, **kwargs), eps)
    try:
        with no_caches():
            yield
    finally:
        lowering.lowerings[op] = original


def no_caches():
    from dynstep._compat.bisector import fresh_compiles

    return fresh_compiles()


class DropSqrt(CustomGraphPass):
    """A post-grad pass with a bug: rewrites `a * rsqrt(b)` (layer_norm's normalisation) as `a / b`."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target is not aten.mul.Tensor or len(node.args) != 2:
                continue
            a, b = node.args
            if isinstance(b, torch.fx.Node) and b.target is aten.rsqrt.default:
                with graph.inserting_before(node):
                    new = graph.call_function(aten.div.Tensor, (a, b.args[0]))
                new.meta.update(node.meta)
                node.replace_all_uses_with(new)
                graph.erase_node(node)

    def uuid(self) -> str:
        return "dynstep-tests-drop-sqrt"


@contextlib.contextmanager
def wrong_post_grad_pass():
    saved = inductor_config.post_grad_custom_post_pass
    inductor_config.post_grad_custom_post_pass = DropSqrt()
    try:
        with no_caches():
            yield
    finally:
        inductor_config.post_grad_custom_post_pass = saved


def _silu_too_steep(x):
    return x * torch.sigmoid(1.5 * x)


@contextlib.contextmanager
def wrong_decomposition(op=aten.silu.default, fn=_silu_too_steep):
    """Inductor's decomposition of `op` becomes `fn` (both tables select_decomp_table may return)."""
    tables = [decomposition.decompositions, select_decomp_table()]
    saved = [table.get(op) for table in tables]
    for table in tables:
        table[op] = fn
    try:
        with no_caches():
            yield
    finally:
        for table, old in zip(tables, saved):
            if old is None:
                table.pop(op, None)
            else:
                table[op] = old
