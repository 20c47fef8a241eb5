"""From an Inductor kernel launch to the native code it runs: the generated C++ kernel's library,
address and source, the Triton kernel's name, or the aten kernel behind an extern or fallback call.

Every Inductor-generated CPU library exports a function named `kernel`, so `break kernel` matches
dozens of places; the wrapper module's global of the launch's name is the Python binding of one
library (`fn.__self__.__file__` is its .so), and `dlsym` in exactly that library gives the address.

    kernel = resolve(graph, entry, key="CPU")     # a NativeKernel with its BreakTargets
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from .. import _compat
from . import elf
from .aten import aten_kernel, op_name
from .provenance import InductorGraph, KernelEntry
from .findings import CPP, EXTERN, FALLBACK, TRITON, BreakTarget, NativeKernel

_KERNEL_DEF = re.compile(r'^\s*extern "C"\s+.*\bkernel\(')


def resolve(graph: InductorGraph, entry: KernelEntry, key: str = "CPU") -> NativeKernel:
    """The native code of one launch, with where a breakpoint for it goes (or why none can)."""
    base = NativeKernel(kind="", name=entry.name, nodes=entry.computes, launch=entry.launch,
                        graph=graph.wrapper_path, launch_line=graph.launch_line(entry))
    obj = graph.wrapper_globals.get(entry.name)
    if _is_cpp_binding(obj):
        return _cpp(base, obj.__self__.__file__)
    if entry.name.startswith("triton_") or "Autotuner" in type(obj).__name__:
        return _triton(base, obj)
    if entry.name.startswith("extern_kernels."):
        return _aten_call(base, EXTERN, _extern_op(graph, entry.name), key)
    if entry.name.startswith("torch.ops."):
        return _aten_call(base, FALLBACK, _fallback_op(entry.name), key)
    return _with(base, kind="other", problem=f"{entry.name}: not a kernel kind dynstep knows how to break in "
                                             "(only C++, Triton, extern and aten fallback kernels)")


def _is_cpp_binding(obj: Any) -> bool:
    """Inductor's C++ kernels are loaded as a Python extension whose `kernel` builtin is the launch."""
    return type(obj).__name__ == "builtin_function_or_method" and getattr(obj, "__name__", "") == "kernel" \
        and str(getattr(getattr(obj, "__self__", None), "__file__", "")).endswith(".so")


def _cpp(base: NativeKernel, library: str) -> NativeKernel:
    source = _generated_source(library)
    address = elf.symbol_in(library, "kernel")
    if address is None:
        return _with(base, kind=CPP, library=library, symbol="kernel", source=source,
                     problem=f"{library} exports no `kernel` (stripped or not loaded by this process); "
                             "recompile with TORCHINDUCTOR_DEBUG_COMPILE=1 (dynstep gdb --debug-kernels)")
    symbol = elf.symbolize(address)
    size = symbol.size if symbol is not None and symbol.start == address else 0
    target = BreakTarget(address=address, size=size, library=library, symbol="kernel")
    return _with(base, kind=CPP, library=library, symbol="kernel", address=address, source=source,
                 targets=(target,))


def _generated_source(library: str) -> str:
    """'…/cxy….main.cpp:3', the line of `extern "C" void kernel(` in the C++ Inductor compiled."""
    if not library.endswith(".so"):
        return ""
    cpp = library[:-3] + ".cpp"
    try:
        with open(cpp, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if _KERNEL_DEF.match(line):
                    return f"{cpp}:{i}"
    except OSError:
        return ""
    return cpp


def _triton(base: NativeKernel, obj: Any) -> NativeKernel:
    """A Triton kernel: cuda-gdb breaks on its name (the cubin's function has the Python name)."""
    fn = getattr(getattr(obj, "fn", None), "fn", None)
    code = getattr(fn, "__code__", None)
    source = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    name = getattr(fn, "__name__", base.name)
    return _with(base, kind=TRITON, symbol=name, source=source, targets=(BreakTarget(cuda_kernel=name),))


def _extern_op(graph: InductorGraph, name: str) -> str:
    """extern_kernels.mm(a, b, out=buf) is torch.mm with out=: aten::mm.out; '' when the extern is
    Python code (bias_addmm, convolution choices) that calls several ops."""
    attr = name.split(".", 1)[1]
    fn = getattr(graph.wrapper_globals.get("extern_kernels"), attr, None)
    if type(fn).__name__ != "builtin_function_or_method":
        return ""
    if _compat.op_has_schema(f"aten::{attr}", "out"):
        return f"aten::{attr}.out"
    return f"aten::{attr}" if _compat.op_has_schema(f"aten::{attr}", "") else ""


def _fallback_op(name: str) -> str:
    """torch.ops.aten.topk.default -> aten::topk ('' for another namespace: a custom op)."""
    parts = name.split(".")
    if len(parts) < 4 or parts[2] != "aten":
        return ""
    base, overload = op_name(".".join(parts[2:]))
    return f"{base}.{overload}" if overload else base


def _aten_call(base: NativeKernel, kind: str, op: str, key: str) -> NativeKernel:
    if not op:
        return _with(base, kind=kind, problem=f"{base.name} is Python code or a custom op, not one aten kernel; "
                                              "break on the aten ops it calls (`native` under aot_eager names them)")
    try:
        kernel = aten_kernel(op, key)
    except RuntimeError as exc:
        return _with(base, kind=kind, problem=str(exc))
    sites = ((base.graph, base.launch_line),) if base.launch_line else ()
    targets = tuple(BreakTarget(address=address, size=size, library=kernel.library, symbol=kernel.wrapper,
                                sites=sites) for _, address, size in kernel.entries)
    return _with(base, kind=kind, library=kernel.library, symbol=kernel.wrapper, address=kernel.entries[0][1],
                 aten=kernel, targets=targets)


def _with(base: NativeKernel, **changes: Any) -> NativeKernel:
    return dataclasses.replace(base, **changes)


def short_path(path: str) -> str:
    """The last two parts of a path (…/xy/cxy….so), for one-line views."""
    head, tail = os.path.split(path)
    return os.path.join(os.path.basename(head), tail) if head else tail
