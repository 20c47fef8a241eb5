"""Every private torch API dynstep touches, in one place, each with the upstream file it reads.

When torch changes one of these, this is the only file to edit; `tests/test_compat.py` checks
each one exists on the installed torch so an upgrade breaks loudly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx


def qualified_name(target: Any) -> str:
    # torch/fx/node.py: _get_qualified_name (used by FX codegen to name call targets)
    from torch.fx.node import _get_qualified_name

    try:
        return _get_qualified_name(target)
    except Exception:  # builtins without __module__ (rare): fall back to the repr
        return getattr(target, "__name__", repr(target))


def current_compile_id() -> str:
    # torch/_guards.py: CompileContext.current_compile_id() -> CompileId("0/0") during a compile
    from torch._guards import CompileContext

    cid = CompileContext.current_compile_id()
    return str(cid) if cid is not None else "?"


def register_ordered_effect(op_name: str) -> None:
    # torch/library.py: _register_effectful_op; torch/_library/effects.py: EffectType.ORDERED.
    # An ORDERED effect keeps the op through AOTAutograd (effect tokens) and Inductor, in order.
    from torch._library.effects import EffectType

    torch.library._register_effectful_op(op_name, EffectType.ORDERED)


def lookup_backend(name: str) -> Callable[..., Any]:
    # torch/_dynamo/backends/registry.py: lookup_backend (also loads entry-point backends)
    from torch._dynamo.backends.registry import lookup_backend as _lookup

    return _lookup(name)


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
                              rewrite: Callable[[torch.fx.GraphModule, bool], torch.fx.GraphModule]):
    # torch/_inductor/compile_fx.py: compile_fx(inner_compile=...) calls inner_compile once per
    # partitioned graph with is_backward=True for the backward graph (after partitioning).
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner_compile(graph: torch.fx.GraphModule, inputs: Sequence[Any], *args: Any, **kwargs: Any):
        graph = rewrite(graph, bool(kwargs.get("is_backward", False)))
        return compile_fx_inner(graph, inputs, *args, **kwargs)

    return compile_fx(gm, example_inputs, inner_compile=inner_compile,
                      config_patches=inductor_config_for_mode(mode))


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


def trace_artifact(name: str, payload: Callable[[], str]) -> None:
    # torch/_logging/_internal.py: trace_structured("artifact") lands in TORCH_TRACE / tlparse.
    from torch._logging import trace_structured

    trace_structured("artifact", metadata_fn=lambda: {"name": name, "encoding": "string"},
                     payload_fn=payload)


def is_fake(t: Any) -> bool:
    # torch/_subclasses/fake_tensor.py
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def has_kernel(qualname: str, dispatch_key: str) -> bool:
    # torch/_C (c10 dispatcher): _dispatch_has_kernel_for_dispatch_key
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualname, dispatch_key))


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
