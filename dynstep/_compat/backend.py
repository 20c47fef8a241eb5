"""Inductor and AOTAutograd as inner compilers: graph hooks, generated code, the wrapper codegen hook."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx


def inductor_config_for_mode(mode: str | None) -> dict[str, Any]:
    # torch/__init__.py: _TorchCompileInductorWrapper turns mode= into inductor config patches,
    # exactly as torch.compile(m, mode=...) does.
    return dict(torch._TorchCompileInductorWrapper(mode, None, None).config)


def inductor_plain(mode: str | None) -> Callable[..., Any]:
    # torch/__init__.py: the very callable torch.compile(m, mode=mode) uses, so the transparent
    # path produces the same code as plain torch.compile.
    return torch._TorchCompileInductorWrapper(mode, None, None)


def inductor_with_graph_hooks(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
                              mode: str | None,
                              rewrite: Callable[[torch.fx.GraphModule, bool], torch.fx.GraphModule],
                              around: Callable[[torch.fx.GraphModule, bool], Any] | None = None):
    # torch/_inductor/compile_fx.py: compile_fx(inner_compile=...) calls inner_compile once per
    # partitioned graph with is_backward=True for the backward graph (after partitioning).
    # `around(graph, is_backward)`, if given, is a context manager entered around Inductor's compile of
    # the rewritten graph (config patches); it may read the compiled graph through its `compiled` slot.
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner_compile(graph: torch.fx.GraphModule, inputs: Sequence[Any], *args: Any, **kwargs: Any):
        is_backward = bool(kwargs.get("is_backward", False))
        graph = rewrite(graph, is_backward)
        if around is None:
            return compile_fx_inner(graph, inputs, *args, **kwargs)
        with around(graph, is_backward) as slot:
            compiled = compile_fx_inner(graph, inputs, *args, **kwargs)
            if slot is not None:
                slot.compiled = compiled
                slot.compile_other = lambda other: _compile_aside(other, inputs, kwargs)
        return compiled

    return compile_fx(gm, example_inputs, inner_compile=inner_compile,
                      config_patches=inductor_config_for_mode(mode))


def _compile_aside(graph: torch.fx.GraphModule, inputs: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    # torch/_inductor/compile_fx.py: compile_fx_inner(gm, example_inputs, **graph_kwargs); a second graph
    # compiled for comparison only (never run): its own cudagraphs flag, so it cannot turn CUDA graphs
    # off for the graph that runs (torch/_inductor/utils.py: BoxedBool).
    # torch/_guards.py: TracingContext.output_strides is filled once per compile by post_compile
    # (torch/_inductor/utils.py: set_tracing_context_output_strides); the graph that runs keeps its own.
    from torch._guards import TracingContext
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.utils import BoxedBool

    aside = {k: v for k, v in kwargs.items() if k in ("is_backward", "is_inference", "static_input_idxs", "graph_id")}
    context = TracingContext.try_get()
    saved = context.output_strides if context is not None else None
    if saved is not None:
        context.output_strides = []
    try:
        return compile_fx_inner(graph, list(inputs), cudagraphs=BoxedBool(False), **aside)
    finally:
        if saved is not None:
            context.output_strides = saved


def aot_eager_with_graph_hooks(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
                               rewrite: Callable[[torch.fx.GraphModule, bool], torch.fx.GraphModule]):
    # torch/_dynamo/backends/debugging.py: aot_eager(fw_compiler=, bw_compiler=) with boxed_nop,
    # the same partitioner and flags as backend="aot_eager".
    from torch._dynamo.backends.debugging import aot_eager, boxed_nop

    def fw(graph, inputs):
        return boxed_nop(rewrite(graph, False), inputs)

    def bw(graph, inputs):
        return boxed_nop(rewrite(graph, True), inputs)

    return aot_eager(gm, example_inputs, fw_compiler=fw, bw_compiler=bw)


def run_and_get_code(fn: Callable[..., Any], *args: Any) -> tuple[Any, list[str]]:
    # torch/_inductor/utils.py: run_and_get_code captures Inductor's generated source
    from torch._inductor.utils import run_and_get_code as _run

    return _run(fn, *args)


def inductor_cache_dir() -> str:
    # torch/_inductor/runtime/cache_dir_utils.py: cache_dir() (TORCHINDUCTOR_CACHE_DIR or the default)
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


@contextlib.contextmanager
def inductor_output_code() -> Iterator[list[str]]:
    # torch/_inductor/graph.py: GraphLowering.save_output_code, the hook
    # torch._inductor.utils.run_and_get_code uses to see the generated wrapper code.
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    saved = GraphLowering.save_output_code
    GraphLowering.save_output_code = staticmethod(codes.append)
    try:
        yield codes
    finally:
        GraphLowering.save_output_code = saved


WRAPPER_CODEGEN_MODULE = "torch._inductor.codegen.custom_extern_kernel_codegen"


def register_wrapper_codegen(kernel_name: str, codegen: Callable[[Any, Callable[[str], None]], None]) -> bool:
    # torch/_inductor/codegen/custom_extern_kernel_codegen.py: CUSTOM_EXTERN_KERNEL_CODEGEN maps a
    # fallback kernel's python_kernel_name ("torch.ops.ns.op.default") to a function that writes its
    # line in the Python wrapper (torch/_inductor/codegen/wrapper.py: generate_fallback_kernel);
    # the C++ wrapper (cpp_wrapper=True) never consults it. Added with the print HOP's codegen
    # (pytorch#167680, late 2025); a torch without it: False, and Inductor keeps the op call.
    try:
        from torch._inductor.codegen.custom_extern_kernel_codegen import (
            CUSTOM_EXTERN_KERNEL_CODEGEN,
            CustomCodegen,
        )
    except ImportError:
        return False
    CUSTOM_EXTERN_KERNEL_CODEGEN.setdefault(kernel_name, CustomCodegen(python=codegen))
    return True


def inductor_codegen_loaded() -> bool:
    # torch/_inductor/codegen/wrapper.py imports custom_extern_kernel_codegen; once it is loaded,
    # registering there costs nothing (no Inductor import on dynstep's behalf).
    import sys

    return "torch._inductor.codegen.wrapper" in sys.modules


def wrapper_import(line: str) -> None:
    # torch/_inductor/codegen/wrapper.py: PythonWrapperCodegen.add_import_once puts a line among
    # the generated module's imports, once per graph (torch/_inductor/virtualized.py: V.graph is
    # the GraphLowering being generated).
    from torch._inductor.virtualized import V

    V.graph.wrapper_code.add_import_once(line)


def extern_kernel_args(node: Any) -> list[str]:
    # torch/_inductor/ir.py: ExternKernel.codegen_args, the argument expressions Inductor itself
    # writes for a fallback kernel (buffer names, reinterpret_tensor views, constants).
    return list(node.codegen_args())
