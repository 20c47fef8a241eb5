"""From an aten op to the CPU kernel the dispatcher runs for it, named on a release build.

The dispatcher's kernel table gives the exact entry addresses (boxed, unboxed, SymInt-unboxed);
libtorch's .symtab names them (`at::(anonymous namespace)::wrapper_CPU_addmm`), and
native_functions.yaml (shipped in torchgen) gives the readable `at::native` implementation,
following `structured_delegate` the way torchgen does.

    k = aten_kernel("aten::addmm.out")
    k.wrapper, k.impl, [hex(a) for _, a, _ in k.entries]
"""

from __future__ import annotations

import functools
import os
import re

from .. import _compat
from . import elf
from .findings import AtenKernel

_WRAPPER = re.compile(r"&((?:at|c10|torch)::[\w:()\s]*?wrapper_\w+)>")


def op_name(op: object) -> tuple[str, str]:
    """An OpOverload, 'aten.addmm.default', 'aten::addmm.out' -> ('aten::addmm', 'out' | '')."""
    text = op if isinstance(op, str) else op.name()   # OpOverload.name(): 'aten::addmm' / 'aten::addmm.out'
    text = text.removeprefix("torch.ops.")
    if "::" not in text:
        namespace, _, rest = text.partition(".")
        text = f"{namespace}::{rest}"
    base, _, overload = text.partition(".")
    return base, "" if overload == "default" else overload


@functools.lru_cache(maxsize=None)
def aten_kernel(op: str, key: str = "CPU") -> AtenKernel:
    """The dispatcher's `key` kernel for op ('aten::addmm.out'); RuntimeError when it cannot be read."""
    name, overload = op_name(op)
    full = f"{name}.{overload}" if overload else name
    (boxed, unboxed, sym_unboxed), registered = _compat.dispatcher_kernel(full, key)
    entries = []
    for kind, address in (("unboxed", unboxed), ("symint", sym_unboxed), ("boxed", boxed)):
        if not address:
            continue
        symbol = elf.symbolize(address)
        if symbol is None:   # guards against a torch whose kernel-table layout moved: say so, never guess
            raise RuntimeError(f"{full}: the dispatcher's {kind} entry {address:#x} is in no loaded library; "
                               "this torch's kernel-table layout is not the one dynstep reads")
        entries.append((kind, symbol))
    if not entries:
        raise RuntimeError(f"{full} has no {key} kernel in the dispatcher")
    first = entries[0][1]
    return AtenKernel(op=f"{name}.{overload or 'default'}", key=key, registered_at=registered,
                      wrapper=_wrapper_name(s for _, s in entries), library=first.library,
                      entries=tuple((kind, s.address, s.size) for kind, s in entries),
                      impl=tuple(_named(first, q) for q in native_impl_names(name, overload, key)
                                 if _named(first, q)),
                      entry_point=_named(first, f"at::_ops::{name.split('::')[1]}{'_' + overload if overload else ''}"
                                                "::call"))


def _wrapper_name(symbols) -> str:
    """The registered wrapper (wrapper_CPU_addmm) inside the template instance the table points at."""
    for s in symbols:
        if s.name:
            m = _WRAPPER.search(s.name)
            return m.group(1) if m else s.name.split("(")[0]
    return ""


def _named(near: elf.Symbol, qualified: str) -> str:
    """The demangled name of the first function `qualified` in `near`'s library ('' when absent)."""
    try:
        hits = elf.SymbolTable.of(near.library).with_prefix(elf.mangled_prefix(qualified), limit=4)
    except (OSError, ValueError):
        return ""
    names = [elf.demangle(m) for m, _, _ in hits if ".cold" not in m]
    return names[0] if names else ""


@functools.lru_cache(maxsize=1)
def _native_functions() -> dict[str, dict]:
    """A small reader of torchgen's packaged native_functions.yaml (no PyYAML):
    'addmm.out' -> {'structured': bool, 'delegate': str|None, 'dispatch': {key: fn}, 'ufunc': bool}."""
    import torchgen

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    out: dict[str, dict] = {}
    current: dict | None = None
    in_dispatch = False
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split(" #", 1)[0].rstrip()
            if line.startswith("- func:"):
                current = out[line[7:].strip().split("(", 1)[0]] = {
                    "structured": False, "delegate": None, "dispatch": {}, "ufunc": False}
                in_dispatch = False
            elif current is not None and line.startswith("  ") and not line.startswith("    "):
                key, _, value = line.strip().partition(":")
                in_dispatch = key == "dispatch"
                if key in ("structured", "structured_delegate", "ufunc_inner_loop"):
                    field = {"structured": "structured", "structured_delegate": "delegate",
                             "ufunc_inner_loop": "ufunc"}[key]
                    current[field] = value.strip() == "True" if key == "structured" else (value.strip() or True)
            elif current is not None and in_dispatch and line.startswith("    "):
                keys, _, fn = line.strip().partition(":")
                for k in keys.split(","):
                    current["dispatch"][k.strip()] = fn.strip()
    return out


def native_impl_names(name: str, overload: str, key: str) -> list[str]:
    """Qualified at::native names implementing op for `key`, following structured_delegate."""
    fname = name.split("::", 1)[1] + (f".{overload}" if overload else "")
    table = _native_functions()
    entry = table.get(fname)
    if entry is None:
        return []
    if entry["delegate"] and key not in entry["dispatch"]:
        entry = table.get(entry["delegate"], entry)
    dispatch = entry["dispatch"]
    fn = next((dispatch[k] for k in (key, "CompositeExplicitAutograd",
                                      "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd")
               if k in dispatch), None)
    base = fname.split(".")[0]
    if entry["structured"]:
        if fn:
            return [f"at::native::structured_{fn}::impl"]
        return [f"at::native::structured_ufunc_{base}_{key}::impl"] if entry["ufunc"] else []
    if fn:
        return [f"at::native::{fn}"]
    return [] if dispatch else [f"at::native::{base}"]
