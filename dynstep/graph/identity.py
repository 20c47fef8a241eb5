"""A stable node identity: the same value of the user's program, whatever run recorded it.

Every recorded hit carries one (`Snapshot.identity`), so two runs that cannot share a process
(two torch versions, two commits, two configs, two ranks, two machines) can be lined up node by
node. It is made of what survives a recompile, a graph break, another torch and a small code edit:

    module path   transformer.h.0.mlp.act          (the innermost module the node ran in)
    op            tanh                             (normalised: torch.tanh, Tensor.tanh, aten.tanh.default -> tanh)
    source        activations.py, "x = torch.tanh(x)"   (file name and the line's text, not its number)
    occurrence    0                                (how many earlier nodes of the graph share the four above)

and written as one string, ``transformer.h.0.mlp.act/tanh@activations.py:"x = torch.tanh(x)"#0``
(a tuple element of a multi-output node adds ``[i]``: ``/var_mean[1]@...``).

    identities(graph)              -> {node: "…"} for every value node of an FX graph
    NodeIdentity.parse(text)       -> NodeIdentity(module, op, file, text, occurrence, output)
    fill_identities(snapshots)     -> the same hits, those without an identity given one from their own fields
    normalize_op("aten._softmax.default") -> "softmax"
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence

import torch.fx

from ..core.records import Snapshot
from . import info as gi

# one canonical name per family of ops that Dynamo, AOTAutograd and aten spell differently
_ALIASES = {
    "truediv": "div", "true_divide": "div", "floordiv": "floor_divide", "divide": "div",
    "multiply": "mul", "subtract": "sub", "pow_by_natural": "pow",
    "mm": "matmul", "bmm": "matmul", "addmm": "matmul", "baddbmm": "matmul", "linear": "matmul",
    "to_copy": "to", "convert_element_type": "to", "type_as": "to", "float": "to", "half": "to",
    "bfloat16": "to", "double": "to", "type": "to",
    "unsafe_view": "view", "reshape": "view", "view_as": "view",
    "expand_as": "expand", "unsqueeze_copy": "unsqueeze", "clone": "clone", "contiguous": "clone",
}
_INPLACE_OPERATORS = {"iadd": "add", "isub": "sub", "imul": "mul", "itruediv": "div", "ifloordiv": "floor_divide",
                      "imatmul": "matmul", "ipow": "pow", "iand": "and", "ior": "or", "ixor": "xor"}
_SDPA = re.compile(r"^scaled_dot_product_\w*attention")
_OVERLOADED = ("aten.", "prims.", "torch.ops.aten.", "torch.ops.prims.")


def normalize_op(name: str) -> str:
    """One name for an op however the graph spelled it (Dynamo, AOTAutograd and aten naming)."""
    for prefix in _OVERLOADED:
        if name.startswith(prefix):   # aten.add.Tensor -> add: the overload is dropped
            name = name[len(prefix):].split(".")[0]
            break
    else:
        name = name.rsplit(".", 1)[-1]
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        name = name[2:-2]
    name = _INPLACE_OPERATORS.get(name, name)
    name = name.lstrip("_")
    if name.startswith("native_"):
        name = name[len("native_"):]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    if _SDPA.match(name):
        return "scaled_dot_product_attention"
    return _ALIASES.get(name, name)


@dataclasses.dataclass(frozen=True)
class NodeIdentity:
    module: str
    op: str
    file: str              # the file's base name ("" when the node has no user line)
    text: str              # the line's text, stripped
    occurrence: int = 0
    output: int | None = None   # which element of a tuple-valued node

    @property
    def base(self) -> tuple[str, str, str, str]:
        return (self.module, self.op, self.file, self.text)

    def __str__(self) -> str:
        output = "" if self.output is None else f"[{self.output}]"
        return f"{self.module}/{self.op}{output}@{self.file}:{json.dumps(self.text)}#{self.occurrence}"

    @classmethod
    def parse(cls, text: str) -> "NodeIdentity":
        """The identity a string names (what `str()` wrote); ValueError when it is not one."""
        m = _PARSE.match(text)
        if m is None:
            raise ValueError(f"not a dynstep node identity: {text!r}; expected module/op@file:\"line text\"#n")
        output = m.group("output")
        return cls(m.group("module"), m.group("op"), m.group("file"), json.loads(m.group("text")),
                   int(m.group("n")), int(output) if output is not None else None)


_PARSE = re.compile(r'^(?P<module>[^/]*)/(?P<op>[^@\[]*)(?:\[(?P<output>\d+)\])?@(?P<file>[^"]*?):'
                    r'(?P<text>"(?:[^"\\]|\\.)*")#(?P<n>\d+)$')


def of_fields(module: str, target: str, source: str, text: str, occurrence: int = 0,
              output: int | None = None) -> NodeIdentity:
    """An identity from what a hit or a node states: module path, op, "file:line" and the line's text."""
    file = os.path.basename(source.rpartition(":")[0] if ":" in source else source)
    return NodeIdentity(module, normalize_op(target), file, text.strip(), occurrence, output)


def identities(graph: torch.fx.Graph) -> dict[torch.fx.Node, NodeIdentity]:
    """The identity of every value node of a graph (the occurrence counts every value node, probed or not)."""
    seen: dict[tuple, int] = {}
    out: dict[torch.fx.Node, NodeIdentity] = {}
    for node in graph.nodes:
        if not gi.is_value_node(node):
            continue
        source, text = gi.source(node)
        ident = of_fields(gi.module_path(node), gi.op_name(node), source, text)
        count = seen.get(ident.base, 0)
        seen[ident.base] = count + 1
        out[node] = dataclasses.replace(ident, occurrence=count)
    return out


def with_output(identity: NodeIdentity | None, index: int | None) -> str:
    """The identity string of a node's value, or of one element of its tuple value."""
    if identity is None:
        return ""
    return str(identity if index is None else dataclasses.replace(identity, output=index))


def fill_identities(snaps: Sequence[Snapshot]) -> list[Snapshot]:
    """Hits recorded without an identity (older recordings, hand-placed probes) get one from their
    own fields; the occurrence numbers the distinct nodes of one graph sharing module, op and line,
    in the order they first ran. Hits that have one are returned as they are."""
    if all(s.identity for s in snaps):
        return list(snaps)
    first: dict[tuple, tuple[int, Snapshot]] = {}
    for s in snaps:
        if not s.identity:
            first.setdefault((s.rank, s.graph, s.node), (s.seq, s))
    given: dict[tuple, str] = {}
    counts: dict[tuple, int] = {}
    for key, (_, s) in sorted(first.items(), key=lambda kv: kv[1][0]):
        index = s.node.partition("[")[2]
        ident = of_fields(s.module, s.target, s.source, s.source_text,
                          output=int(index.rstrip("]")) if index.rstrip("]").isdigit() else None)
        group = (s.rank, s.graph, ident.base, ident.output)
        n = counts.get(group, 0)
        counts[group] = n + 1
        given[key] = str(dataclasses.replace(ident, occurrence=n))
    return [s if s.identity else dataclasses.replace(s, identity=given[(s.rank, s.graph, s.node)]) for s in snaps]
