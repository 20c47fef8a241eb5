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


def with_effects_op() -> Any:
    # torch/_higher_order_ops/effects.py: AOTAutograd wraps every effectful op call as
    # with_effects(token, op, *args) -> (token, *results) and threads the token through the graph.
    return torch.ops.higher_order.with_effects


def has_kernel(qualname: str, dispatch_key: str) -> bool:
    # torch/_C (c10 dispatcher): _dispatch_has_kernel_for_dispatch_key
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualname, dispatch_key))


def effect_of(op: Any) -> Any:
    # torch/_higher_order_ops/effects.py: _get_effect (None when the op is not effectful)
    from torch._higher_order_ops.effects import _get_effect

    return _get_effect(op)


def run_and_get_code(fn: Callable[..., Any], *args: Any) -> tuple[Any, list[str]]:
    # torch/_inductor/utils.py: run_and_get_code captures Inductor's generated source
    from torch._inductor.utils import run_and_get_code as _run

    return _run(fn, *args)


def inductor_cache_dir() -> str:
    # torch/_inductor/runtime/cache_dir_utils.py: cache_dir() (TORCHINDUCTOR_CACHE_DIR or the default)
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


def comptime() -> Callable[..., None]:
    # torch/_dynamo/comptime.py: comptime(fn) runs fn(ComptimeContext) while Dynamo traces; the
    # caller must call it from its own frame (the context's translator is the calling frame).
    from torch._dynamo.comptime import comptime as _comptime

    return _comptime


def comptime_translator(ctx: Any) -> Any:
    # torch/_dynamo/comptime.py: the InstructionTranslator behind a ComptimeContext (no BC promise:
    # tests/test_compat.py checks the attributes dynstep reads: parent, symbolic_locals, output).
    return ctx._i_will_not_complain_if_bc_breaks_InstructionTranslator()


def realize(var: Any) -> Any:
    # torch/_dynamo/variables/lazy.py: LazyVariableTracker wraps a local until first use
    return var.realize() if hasattr(var, "realize") else var


def is_tensor_variable(var: Any) -> bool:
    # torch/_dynamo/variables/tensor.py
    from torch._dynamo.variables import TensorVariable

    return isinstance(realize(var), TensorVariable)


def fake_of(var: Any) -> Any:
    # torch/_dynamo/variables/tensor.py: a TensorVariable's proxy node carries the FakeTensor
    return realize(var).as_proxy().node.meta.get("example_value")


def python_constant(var: Any) -> tuple[bool, Any]:
    var = realize(var)
    try:
        return var.is_python_constant(), var.as_python_constant() if var.is_python_constant() else None
    except Exception:
        return False, None


def function_of_variable(var: Any) -> Callable[..., Any] | None:
    # torch/_dynamo/variables/functions.py: rebuild a real function from a traced one, the way
    # torch/_dynamo/variables/misc.py (ComptimeVariable.call_function) does for comptime itself.
    import types

    from torch._dynamo.variables import ConstantVariable, NestedUserFunctionVariable, UserFunctionVariable

    var = realize(var)
    if isinstance(var, ConstantVariable) and var.value is None:
        return None
    if isinstance(var, UserFunctionVariable):
        return var.get_function()
    if isinstance(var, NestedUserFunctionVariable):
        code = var.get_code()
        if var.closure:
            raise TypeError(f"dynstep.breakpoint(when=...) must not close over variables ({code.co_freevars}); "
                            "take the values as parameters named like your locals: when=lambda h: h.max() > 10")
        return types.FunctionType(code, var.f_globals, code.co_name,
                                  tuple(var.defaults.items) if var.defaults else None, ())
    raise TypeError(f"dynstep.breakpoint(when=...) must be a function, got {type(var).__name__}")


def call_op_in_trace(tx: Any, op: Any, tensor_lists: list[list[Any]], constant: int) -> None:
    # torch/_dynamo/variables/builder.py: VariableTracker.build + call_function records the op in
    # the graph being traced, with fake propagation, exactly as if user code had called it.
    from torch._dynamo.variables import ConstantVariable, ListVariable
    from torch._dynamo.variables.base import VariableTracker

    args = [ListVariable([realize(v) for v in vs]) for vs in tensor_lists]
    VariableTracker.build(tx, op).call_function(tx, [*args, ConstantVariable.create(constant)], {})


def comptime_local(ctx: Any, name: str) -> Any:
    # torch/_dynamo/comptime.py: ComptimeVar wraps a VariableTracker; dynstep reads it directly
    return ctx.get_local(name)._i_will_not_complain_if_bc_breaks_VariableTracker()


def recompile_reason() -> str | None:
    # torch/_dynamo/convert_frame.py puts the guard failure behind a recompile in the metrics context
    from torch._dynamo.utils import get_metrics_context

    return get_metrics_context()._metrics.get("recompile_reason")


def graph_breaks_so_far() -> list[str]:
    # torch/_dynamo/utils.py: counters["graph_break"] counts graph-break reasons in this process
    from torch._dynamo.utils import counters

    return list(counters["graph_break"].keys())


def shape_guards(tx: Any) -> list[str]:
    # torch/fx/experimental/symbolic_shapes.py: ShapeEnv.guards (ShapeGuard.expr)
    env = getattr(tx.output, "shape_env", None)
    return [str(g.expr) for g in getattr(env, "guards", [])] if env is not None else []


def symbolic_value(var: Any) -> Any:
    # torch/_dynamo/variables/tensor.py: SymNodeVariable.sym_num is the SymInt/SymFloat it tracks
    sym = getattr(realize(var), "sym_num", None)
    return sym
# -- the bytecode stepper (dynstep/bytecode.py) ------------------------------------------------

BYTECODE_HOOKS = ("set_bytecode_debugger_callback", "get_bytecode_debugger_callback",
                  "_get_frame_value_stack_with_depth", "NULL_STACK_VALUE")


def bytecode_hooks_missing() -> str | None:
    """None when torch has the hooks below, else which are missing (torch 2.11 has none of them;
    torch 2.13 has all: they came with torch/_dynamo/bytecode_debugger.py)."""
    import torch._C._dynamo.eval_frame as eval_frame

    missing = [name for name in BYTECODE_HOOKS if not hasattr(eval_frame, name)]
    if not missing:
        return None
    return (f"torch {torch.__version__} lacks torch._C._dynamo.eval_frame.{', '.join(missing)} "
            "(torch's bytecode debugger hooks, present in torch 2.13)")


def set_dynamo_code_callback(fn: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    # torch/csrc/dynamo/eval_frame.c (exposed in torch/_C/_dynamo/eval_frame.pyi):
    # set_bytecode_debugger_callback(fn) calls fn(code) before any Dynamo-generated code object
    # runs, including ones compiled before it was set; torch/_dynamo/bytecode_debugger.py uses it.
    # Returns the callback it replaced, so nesting restores it.
    from torch._C._dynamo.eval_frame import get_bytecode_debugger_callback, set_bytecode_debugger_callback

    previous = get_bytecode_debugger_callback()
    set_bytecode_debugger_callback(fn)
    return previous


def frame_value_stack(frame: Any, depth: int) -> list[Any]:
    # torch/csrc/dynamo/eval_frame.c: _get_frame_value_stack_with_depth(frame, depth) reads the
    # frame's real value stack (bottom first); NULL slots come back as NULL_STACK_VALUE.
    from torch._C._dynamo.eval_frame import NULL_STACK_VALUE, _get_frame_value_stack_with_depth

    return ["<NULL>" if v is NULL_STACK_VALUE else v for v in _get_frame_value_stack_with_depth(frame, depth)]


def original_code(code: Any) -> Any:
    # torch/_dynamo/utils.py: orig_code_map (transformed code -> the user's code), filled by
    # torch/_dynamo/convert_frame.py when it builds the transformed code.
    from torch._dynamo.utils import orig_code_map

    return orig_code_map.get(code)


def cache_entries(code: Any) -> list[Any]:
    # torch/_dynamo/eval_frame.py: _debug_get_cache_entry_list(code) -> [CacheEntry], newest
    # first; each has .code (the transformed code) and .guard_manager (GuardManagerWrapper,
    # torch/_dynamo/guards.py, with .code_parts and .check_verbose(f_locals)).
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return list(_debug_get_cache_entry_list(code))


def recompile_reasons(code: Any) -> list[str]:
    # torch/_dynamo/utils.py: guard_failures[original code] -> the failed-guard reasons Dynamo
    # recorded at each recompile (torch/_dynamo/guards.py: get_guard_fail_reason).
    from torch._dynamo.utils import guard_failures

    return [str(r) for r in guard_failures.get(code, [])]


def wrap_dynamo_compiler(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]):
    # torch/_dynamo/output_graph.py: OutputGraph._call_user_compiler(gm, example_inputs) calls
    # self.compiler_fn, the backend given to torch.compile; while the returned context manager
    # is open every graph goes to wrap(compiler_fn) instead, also for functions decorated before.
    import contextlib

    from torch._dynamo.output_graph import OutputGraph

    original = OutputGraph._call_user_compiler

    def call_user_compiler(self: Any, gm: Any, example_inputs: Any) -> Any:
        saved = self.compiler_fn
        self.compiler_fn = wrap(saved)
        try:
            return original(self, gm, example_inputs)
        finally:
            self.compiler_fn = saved

    @contextlib.contextmanager
    def patched():
        OutputGraph._call_user_compiler = call_user_compiler
        try:
            yield
        finally:
            OutputGraph._call_user_compiler = original

    return patched()
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


def guard_module_constant(module: str, attribute: str) -> bool:
    # torch/_dynamo/source.py: ImportSource + AttrSource name a module attribute the way Dynamo's
    # own guards do; torch/_dynamo/guards.py: install_guard adds the guard to the frame being
    # compiled (a backend runs inside Dynamo's TracingContext, before the frame's guards are built)
    # and CONSTANT_MATCH compares the value, so a change recompiles the frame and both entries stay
    # in Dynamo's cache. False outside a Dynamo compile (nothing to guard).
    from torch._dynamo.guards import GuardBuilder, install_guard
    from torch._dynamo.source import AttrSource, ImportSource
    from torch._guards import TracingContext

    if TracingContext.try_get() is None:
        return False
    top, *path = module.split(".")
    source: Any = ImportSource(top)
    for part in (*path, attribute):
        source = AttrSource(source, part)
    install_guard(source.make_guard(GuardBuilder.CONSTANT_MATCH))
    return True


def print_options() -> dict[str, Any]:
    # torch/_tensor_str.py: PRINT_OPTS holds what torch.set_printoptions set (no public getter)
    return dict(torch._tensor_str.PRINT_OPTS.__dict__)


def restore_print_options(saved: dict[str, Any]) -> None:
    torch._tensor_str.PRINT_OPTS.__dict__.update(saved)
