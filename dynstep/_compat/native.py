"""Mixed-mode debugging's private torch APIs: Inductor's provenance, the dispatcher's kernel table,
and replaying an FX node on fake values to see which aten ops it dispatches to.

    with inductor_provenance(graphs.append):        # every Inductor graph compiled meanwhile
        compiled(x)
    graphs[0].mapping                                # '{"preToPost": ..., "cppCodeToPost": ...}'
    dispatcher_kernel("aten::addmm", "CPU")          # ((boxed, unboxed, sym_unboxed), "RegisterCPU_2.cpp:5051")
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.fx


@dataclasses.dataclass(frozen=True)
class CompiledGraphFacts:
    """What dynstep keeps of one graph Inductor compiled (cache hit or miss)."""

    wrapper_path: str                  # the generated Python wrapper module ("" for cpp_wrapper / AOTI)
    wrapper_globals: dict[str, Any] = dataclasses.field(repr=False, compare=False)   # its kernels by name
    mapping: str = "{}"                # JSON: preToPost, postToPre, cppCodeToPost, postToCppCode
    stack_traces: str = "{}"           # JSON: kernel key -> the user stack traces behind it
    compile_id: str = "?"
    is_backward: bool = False


_listeners: list[Callable[[CompiledGraphFacts], None]] = []
_lock = threading.Lock()
_original_post_compile: Any = None


@contextlib.contextmanager
def inductor_provenance(on_graph: Callable[[CompiledGraphFacts], None]) -> Iterator[None]:
    """Inductor records which kernel computes which FX node, and `on_graph` sees every graph it
    compiles or loads from its cache meanwhile. Nests; restores Inductor's config and class on exit."""
    # torch/_inductor/config.py: trace.provenance_tracking_level (1 = the node <-> kernel mapping);
    # it is part of the FX graph cache key (torch/_inductor/codecache.py: FxGraphHashDetails), so
    # graphs cached without it compile once more, and the mapping is stored with cache entries.
    import torch._inductor.config as inductor_config

    level = max(int(inductor_config.trace.provenance_tracking_level), 1)
    with inductor_config.patch({"trace.provenance_tracking_level": level}):
        _listen(on_graph)
        try:
            yield
        finally:
            _unlisten(on_graph)


def _listen(on_graph: Callable[[CompiledGraphFacts], None]) -> None:
    # torch/_inductor/output_code.py: CompiledFxGraph.post_compile runs right after every graph is
    # compiled or loaded from the FX graph cache (its docstring: "whether or not we have a cache hit").
    global _original_post_compile
    from torch._inductor.output_code import CompiledFxGraph

    with _lock:
        _listeners.append(on_graph)
        if _original_post_compile is None:
            _original_post_compile = CompiledFxGraph.post_compile
            CompiledFxGraph.post_compile = _post_compile


def _unlisten(on_graph: Callable[[CompiledGraphFacts], None]) -> None:
    global _original_post_compile
    from torch._inductor.output_code import CompiledFxGraph

    with _lock:
        _listeners.remove(on_graph)
        if not _listeners and _original_post_compile is not None:
            CompiledFxGraph.post_compile = _original_post_compile
            _original_post_compile = None


def _post_compile(self: Any, example_inputs: Any, constants: Any, graph_kwargs: Any) -> None:
    # Read before post_compile: with CUDA graphs it replaces current_callable by a cudagraphify wrapper.
    facts = _facts_of(self, graph_kwargs)
    _original_post_compile(self, example_inputs, constants, graph_kwargs)
    for listener in list(_listeners):
        listener(facts)


def _facts_of(graph: Any, graph_kwargs: Any) -> CompiledGraphFacts:
    # torch/_inductor/output_code.py: CompiledFxGraph.current_callable is the wrapper module's `call`
    # (compiled_module.call, torch/_inductor/compile_fx.py); inductor_provenance_mapping_str and
    # inductor_provenance_stack_traces_str are the JSON that torch/_inductor/debug.py dumps.
    from .dynamo import current_compile_id

    fn = getattr(graph.current_callable, "__func__", graph.current_callable)
    glob = getattr(fn, "__globals__", None)
    glob = glob if isinstance(glob, dict) and glob.get("__file__", "").endswith(".py") else {}
    return CompiledGraphFacts(wrapper_path=glob.get("__file__", ""), wrapper_globals=glob,
                              mapping=getattr(graph, "inductor_provenance_mapping_str", None) or "{}",
                              stack_traces=getattr(graph, "inductor_provenance_stack_traces_str", None) or "{}",
                              compile_id=current_compile_id(),
                              is_backward=bool((graph_kwargs or {}).get("is_backward")))


def dispatcher_kernel(op: str, key: str) -> tuple[tuple[int, int, int], str]:
    """((boxed, unboxed, sym_unboxed) entry addresses, "File.cpp:line" it was registered at) of the
    kernel the dispatcher runs for `op` ("aten::addmm" or "aten::addmm.out") at dispatch key `key`.
    Zero where an entry is missing. The caller checks the addresses resolve to a loaded library."""
    # torch/csrc/utils/python_dispatch.cpp: _dispatch_get_computed_kernel_for_dispatch_key returns a
    # pybind11 c10::impl::SafeKernelFunction (aten/src/ATen/core/boxing/KernelFunction.h), whose first
    # member is a c10::KernelFunction: {BoxedKernel{intrusive_ptr functor_; boxed_kernel_func_};
    # unboxed_kernel_func_; sym_unboxed_kernel_func_}. A pybind11 instance of a simple type holds its
    # value pointer right after PyObject_HEAD (pybind11/detail/common.h: instance::simple_value_holder).
    kernel = torch._C._dispatch_get_computed_kernel_for_dispatch_key(op, getattr(torch._C.DispatchKey, key))
    value = ctypes.c_void_p.from_address(id(kernel) + 2 * ctypes.sizeof(ctypes.c_void_p)).value
    if not value:
        raise RuntimeError(f"{op}: the dispatcher's kernel object has no value on torch {torch.__version__}")
    words = [ctypes.c_void_p.from_address(value + i * ctypes.sizeof(ctypes.c_void_p)).value or 0 for i in range(4)]
    match = re.search(r"registered at (\S+?)'?\)?$", repr(kernel))
    where = match.group(1).rsplit("/", 1)[-1] if match else repr(kernel)
    return (words[1], words[2], words[3]), where


def op_has_schema(name: str, overload: str) -> bool:
    # torch/csrc/utils/python_dispatch.cpp: _dispatch_find_schema_or_throw("aten::addmm", "out")
    try:
        torch._C._dispatch_find_schema_or_throw(name, overload)
    except RuntimeError:
        return False
    return True


def returns_view(op: Any) -> bool:
    """Whether an OpOverload returns an alias of an input without writing it (view, t, permute)."""
    # torch/_ops.py: OpOverload._schema is the c10::FunctionSchema; alias_info marks `Tensor(a)`.
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


def aten_ops_of_node(node: torch.fx.Node) -> list[Any]:
    """The aten ops a Dynamo graph's call_function/call_method node dispatches to, found by running
    it on its fake example values under a dispatch mode (nothing real runs)."""
    # torch/utils/_python_dispatch.py: TorchDispatchMode; torch/_guards.py: detect_fake_mode finds the
    # FakeTensorMode of Dynamo's example values (node.meta["example_value"]).
    from torch._guards import detect_fake_mode
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[Any] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func not in seen and func.namespace == "aten":
                seen.append(func)
            return func(*args, **(kwargs or {}))

    def fake(n: torch.fx.Node) -> Any:
        return n.meta.get("example_value", n.meta.get("val"))

    args = torch.fx.node.map_arg(node.args, fake)
    kwargs = torch.fx.node.map_arg(node.kwargs, fake)
    mode = detect_fake_mode((args, kwargs))
    if mode is None or node.op not in ("call_function", "call_method"):
        return []
    with mode, Recorder():
        if node.op == "call_function":
            node.target(*args, **kwargs)
        else:
            getattr(args[0], node.target)(*args[1:], **kwargs)
    return seen
