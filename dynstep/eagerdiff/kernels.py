"""Which Inductor kernel computed an FX node, read from Inductor's own provenance comments.

Inductor writes, above each kernel in the code it generates, the FX nodes the kernel came from
(`# Topologically Sorted Source Nodes: [x_2, relu], Original ATen: [aten.relu]`, produced by
torch/_inductor/utils.py get_kernel_metadata from each node's `from_node` chain, whose root is
the Dynamo graph's node name). We map node names to the kernel defined right after the comment.

    with _compat.inductor_output_code() as codes:
        compile(...)
    kernel_for(codes, "x_2", "torch.relu")   -> "cpp_fused_relu_2"
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_SOURCE = re.compile(r"Source Nodes: \[(?P<nodes>[^\]]*)\]")
_DEFINED = re.compile(r"^(?P<name>[A-Za-z_]\w*) = async_compile\.\w+\(", re.M)
_CALL = re.compile(r"(?P<name>extern_kernels\.\w+|[A-Za-z_]\w*)(?:\.run)?\(")


def kernel_of(codes: Iterable[str]) -> dict[str, str]:
    """Node name -> the first kernel launched under a provenance comment listing that node.

    The comment sits above the kernel's launch in the wrapper's `call()` (CPU and GPU alike)
    and, for some backends, above its definition; either way the next kernel named after it is
    the one that computed those nodes.
    """
    out: dict[str, str] = {}
    for code in codes:
        defined = {m.group("name") for m in _DEFINED.finditer(code)}
        lines = code.splitlines()
        for i, line in enumerate(lines):
            m = _SOURCE.search(line)
            if m is None:
                continue
            kernel = _next_kernel(lines[i + 1:i + 6], defined)
            names = [n.strip() for n in m.group("nodes").split(",") if n.strip()]
            if kernel.startswith("extern_kernels."):
                names = names[-1:]  # a library call computes the last node; the rest fed it
            for name in names:
                if kernel:
                    out.setdefault(name, kernel)
    return out


def kernel_for(codes: Iterable[str], node: str, op: str) -> str:
    """The kernel that computed `node`: from the provenance comments, else (Inductor's C++
    backend puts no comment at its own kernels' launches) the one generated kernel whose
    name lists the node's op (`cpp_fused_mul_relu_tanh_0` for relu), when there is exactly one."""
    codes = list(codes)
    named = kernel_of(codes).get(node, "")
    if named:
        return named
    short = op.rsplit(".", 1)[-1].split("_")[0]
    hits = {m.group("name") for code in codes for m in _DEFINED.finditer(code)
            if short and short in m.group("name").split("_")}
    return hits.pop() if len(hits) == 1 else ""


def _next_kernel(lines: list[str], defined: set[str]) -> str:
    for line in lines:
        if "Source Nodes:" in line:
            return ""
        head = _DEFINED.match(line.strip())
        if head is not None:
            return head.group("name")
        for m in _CALL.finditer(line):
            name = m.group("name")
            if name in defined or name.startswith("extern_kernels."):
                return name
    return ""
