"""eager and aot_eager: the aten ops an FX node runs, their dispatcher kernels, and the FX line
that launches each (an aten kernel serves every call of its op; the line tells this node's apart).

Under aot_eager the running graph is AOTAutograd's aten-level forward: its nodes name the Dynamo
node they came from (`meta["from_node"]`). Under eager it is Dynamo's own graph: the node's
torch-level call is replayed on its fake example values to see which aten ops it dispatches to.

    kernels, problems = node_kernels(gm, frame_code, "linear_3", key="CPU")
"""

from __future__ import annotations

import linecache
import re
from types import CodeType
from typing import Any

import torch.fx

from .. import _compat
from .aten import aten_kernel, op_name
from .findings import ATEN, BreakTarget, NativeKernel


def node_kernels(gm: torch.fx.GraphModule, code: CodeType, node: str,
                 key: str = "CPU") -> tuple[tuple[NativeKernel, ...], tuple[str, ...]]:
    """The aten kernels that compute `node` in the FX graph `gm` whose forward runs as `code`."""
    calls = _aten_calls(gm, node)
    if not calls:
        return (), (f"node {node} runs no aten op in this graph (a view, a constant, or computed elsewhere)",)
    kernels, problems = [], []
    for fx_name, op in calls:
        full = "{}.{}".format(*op_name(op)) if op_name(op)[1] else op_name(op)[0]
        line = fx_line(code, fx_name)
        sites = ((code.co_filename, line),) if line else ()
        try:
            k = aten_kernel(full, key)
        except RuntimeError as exc:
            problems.append(str(exc))
            continue
        targets = tuple(BreakTarget(address=a, size=size, library=k.library, symbol=k.wrapper, sites=sites)
                        for _, a, size in k.entries)
        kernels.append(NativeKernel(kind=ATEN, name=k.op, nodes=(node,), graph=code.co_filename, launch_line=line,
                                    library=k.library, symbol=k.wrapper, address=k.entries[0][1], aten=k,
                                    targets=targets))
    return tuple(kernels), tuple(problems)


def _aten_calls(gm: torch.fx.GraphModule, node: str) -> list[tuple[str, Any]]:
    """(FX node name, aten OpOverload) of the work behind Dynamo node `node`, views dropped when
    something else is left (a view alone: its own op, so the user still sees where it runs)."""
    found: list[tuple[str, Any]] = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or not _compat.is_op_overload(n.target):
            continue
        sources = n.meta.get("from_node") or ()
        if any(getattr(s, "name", None) == node for s in sources):
            found.append((n.name, n.target))
    if not found:
        dynamo_node = next((n for n in gm.graph.nodes if n.name == node), None)
        if dynamo_node is not None:
            found = [(node, op) for op in _compat.aten_ops_of_node(dynamo_node)]
    work = [(name, op) for name, op in found if not _compat.returns_view(op)]
    return work or found


def fx_line(code: CodeType, fx_name: str) -> int:
    """The line of `fx_name = ...` (or `a, fx_name = ...`) in the generated forward, what py-bt shows."""
    lines = linecache.getlines(code.co_filename)
    pattern = re.compile(r"^\s+(?:\w+, )*" + re.escape(fx_name) + r"(?:, \w+)* = ")
    for i in range(max(code.co_firstlineno - 1, 0), len(lines)):
        if pattern.match(lines[i]):
            return i + 1
    return 0
