"""Dynamo: compile ids, backends, comptime (dynstep.breakpoint), guards, the user compiler hook."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any



def current_compile_id() -> str:
    # torch/_guards.py: CompileContext.current_compile_id() -> CompileId("0/0") during a compile
    from torch._guards import CompileContext

    cid = CompileContext.current_compile_id()
    return str(cid) if cid is not None else "?"


def fakifies_first_call() -> bool:
    """True while DDPOptimizer compiles one piece of a split graph (torch/_dynamo/backends/distributed.py
    sets TracingContext.fakify_first_call, torch/_guards.py)."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    return bool(ctx is not None and getattr(ctx, "fakify_first_call", False))


@contextlib.contextmanager
def real_first_call():
    """Compile a DDPOptimizer piece with aot_eager as if it were not one: AOTAutograd's first call then
    runs the graph under DDPOptimizer's FakeTensorMode instead of returning the forward graph's traced
    outputs. Those include the effect tokens of dynstep's ordered probe op, which only Inductor removes
    (torch/_functorch/_aot_autograd/runtime_wrappers.py: FakifiedOutWrapper returns them in place of the
    piece's outputs and the next piece receives a token)."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    saved = getattr(ctx, "fakify_first_call", False)
    if ctx is not None:
        ctx.fakify_first_call = False
    try:
        yield
    finally:
        if ctx is not None:
            ctx.fakify_first_call = saved


def lookup_backend(name: str) -> Callable[..., Any]:
    # torch/_dynamo/backends/registry.py: lookup_backend (also loads entry-point backends)
    from torch._dynamo.backends.registry import lookup_backend as _lookup

    return _lookup(name)


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


def compile_attempt(tx: Any) -> Any:
    # torch/_dynamo/symbolic_convert.py: every translator of one compile attempt (inlined frames too)
    # shares the root's OutputGraph (torch/_dynamo/output_graph.py), made anew for each attempt; compile
    # ids restart after torch._dynamo.reset(), this object does not. Opaque: a key, weakly held.
    return tx.output


def recompile_reason() -> str | None:
    # torch/_dynamo/convert_frame.py puts the guard failure behind a recompile in the metrics context
    from torch._dynamo.utils import get_metrics_context

    return get_metrics_context()._metrics.get("recompile_reason")


def graph_breaks_so_far() -> list[str]:
    # torch/_dynamo/utils.py: counters["graph_break"] counts graph-break reasons in this process
    from torch._dynamo.utils import counters

    return list(counters["graph_break"].keys())


@dataclasses.dataclass(frozen=True)
class TraceFrame:
    """What Dynamo knows at a comptime call, as plain data (dynstep.breakpoint's compile-time stop).

    `locals` pairs each name with an opaque variable handle: pass it back to this module
    (is_tensor_variable, fake_of, python_constant, symbolic_value, call_op_in_trace); never read it.
    """

    file: str
    line: int
    function: str
    code: str
    locals: tuple[tuple[str, Any], ...]
    backtrace: tuple[tuple[str, int, str, str], ...]   # (file, line, function, code), outermost first
    guards: tuple[tuple[str, str], ...]                # (guarded source, guard kind), sorted
    shape_guards: tuple[str, ...]
    graph_src: str                                     # the FX graph traced so far, as Python
    translator: Any                                    # opaque: for call_op_in_trace


def comptime_frame(ctx: Any) -> TraceFrame:
    # torch/_dynamo/comptime.py: ComptimeContext wraps the InstructionTranslator of the frame that
    # called comptime (dynstep.breakpoint itself); its .parent is the user's frame
    # (torch/_dynamo/symbolic_convert.py: symbolic_locals, frame_summary()), .output the OutputGraph
    # (torch/_dynamo/output_graph.py: guards; shape_env in symbolic_shapes.py).
    tx = comptime_translator(ctx)
    user = tx.parent
    here = user.frame_summary()
    chain, t = [], user
    while t is not None:
        s = t.frame_summary()
        chain.append((s.filename, s.lineno, s.name, (s.line or "").strip()))
        t = getattr(t, "parent", None)
    guards = sorted((str(g.name), _guard_kind(g)) for g in tx.output.guards)
    return TraceFrame(file=here.filename, line=here.lineno, function=here.name, code=(here.line or "").strip(),
                      locals=tuple(user.symbolic_locals.items()), backtrace=tuple(reversed(chain)),
                      guards=tuple(guards), shape_guards=tuple(shape_guards(tx)),
                      graph_src=ctx.graph().python_code("self").src, translator=tx)


def python_value(var: Any) -> tuple[bool, Any]:
    """(True, what `p` shows for a symbolic local) or (False, None): a tensor's FakeTensor, a SymInt,
    a constant's value, a list/tuple of those, a module or user object as itself."""
    # torch/_dynamo/variables/: TensorVariable (fake_of), SymNodeVariable.sym_num, ConstantVariable,
    # BaseListVariable.items, NNModuleVariable (.module_key into tx.output), UnspecializedNNModuleVariable
    # and UserDefinedObjectVariable (.value, the real object)
    var = realize(var)
    if is_tensor_variable(var):
        fake = fake_of(var)
        return fake is not None, fake
    ok, value = python_constant(var)
    if ok:
        return True, value
    sym = symbolic_value(var)
    if sym is not None:
        return True, sym
    items = getattr(var, "items", None)
    if isinstance(items, list):
        values = [python_value(v) for v in items]
        if all(ok for ok, _ in values):
            made = [v for _, v in values]
            return True, tuple(made) if type(var).__name__ == "TupleVariable" else made
    value = getattr(var, "value", None)
    return (value is not None), value


def compile_scope(ctx: Any, frame: TraceFrame) -> dict[str, Any]:
    """What an expression at a comptime stop can name besides the locals: `graph` (a copy of the FX
    graph so far: reading it never changes Dynamo's), `shape_guards` (sympy expressions) and `ctx`."""
    # torch/_dynamo/comptime.py: ComptimeContext(tx) is what comptime hands its function, for the
    # frame `tx`; the user's `ctx` is the one for their frame (the caller of dynstep.breakpoint)
    import torch.fx
    from torch._dynamo.comptime import ComptimeContext

    graph = torch.fx.Graph()
    graph.graph_copy(ctx.graph(), {})
    env = getattr(frame.translator.output, "shape_env", None)
    exprs = tuple(g.expr for g in getattr(env, "guards", [])) if env is not None else ()
    return {"graph": graph, "shape_guards": exprs, "ctx": ComptimeContext(frame.translator.parent)}


@contextlib.contextmanager
def guards_suppressed(tx: Any) -> Iterator[None]:
    # torch/fx/experimental/symbolic_shapes.py: ShapeEnv.suppress_guards() lets an expression compare
    # symbolic sizes (h.shape[0] > 2) without adding a guard to the graph being compiled
    env = getattr(tx.output, "shape_env", None)
    with env.suppress_guards() if env is not None else contextlib.nullcontext():
        yield


def _guard_kind(guard: Any) -> str:
    # torch/_guards.py: Guard.create_fn is a GuardBuilder method (or a functools.partial of one)
    fn = getattr(guard, "create_fn", None)
    return getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "") or "guard"


def input_local_name(node: Any) -> str:
    """The caller's local variable a graph input (placeholder) stands for, or "" (attributes, globals)."""
    # torch/_dynamo/output_graph.py puts a GraphArg in each placeholder's meta["grapharg"]; its source
    # is a LocalSource (torch/_dynamo/source.py: local_name) when the input is a local of the frame.
    source = getattr(node.meta.get("grapharg"), "source", None)
    name = getattr(source, "local_name", None) if type(source).__name__ == "LocalSource" else None
    return name if isinstance(name, str) and name.isidentifier() else ""


def shape_guards(tx: Any) -> list[str]:
    # torch/fx/experimental/symbolic_shapes.py: ShapeEnv.guards (ShapeGuard.expr)
    env = getattr(tx.output, "shape_env", None)
    return [str(g.expr) for g in getattr(env, "guards", [])] if env is not None else []


def symbolic_value(var: Any) -> Any:
    # torch/_dynamo/variables/tensor.py: SymNodeVariable.sym_num is the SymInt/SymFloat it tracks
    sym = getattr(realize(var), "sym_num", None)
    return sym


def wrap_dynamo_compiler(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]):
    # torch/_dynamo/output_graph.py: OutputGraph._call_user_compiler(gm, example_inputs) calls
    # self.compiler_fn, the backend given to torch.compile; while the returned context manager
    # is open every graph goes to wrap(compiler_fn) instead, also for functions decorated before.
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
def dynamo_paused() -> Iterator[None]:
    """Frames run as plain CPython inside the block (a debugger's stop inside Dynamo-produced code,
    where Dynamo's frame callback would compile every function the debugger calls)."""
    # torch/_C/_dynamo/eval_frame.pyi: set_eval_frame(callback) sets this thread's frame callback and
    # returns the one it replaced; None turns it off. The exact previous value is put back:
    # torch.compiler.disable's exit re-derives it from the stance (torch/_dynamo/eval_frame.py,
    # _callback_from_stance), which turned a stop's later calls into compiles.
    from torch._C._dynamo.eval_frame import set_eval_frame

    prior = set_eval_frame(None)
    try:
        yield
    finally:
        set_eval_frame(prior)


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


_THROUGH: dict[type, type] = {}


def through_dynamo(exc: BaseException, frame: Any) -> BaseException:
    """`exc` as an exception Dynamo hands to the user unchanged (same type to `except`, same message).

    torch/_dynamo/output_graph.py (_call_user_compiler) wraps every exception a backend raises in
    BackendCompilerFailed except ShortenTraceback (torch/_dynamo/exc.py), which convert_frame.py
    re-raises and eval_frame.py trims to `first_useful_frame`; Dynamo appends its TORCHDYNAMO_VERBOSE
    hint only to exceptions carrying `real_stack` (exc.py: augment_exc_message), which this type
    refuses to keep. So a backend's own OptionsError reaches `except ValueError` in user code.
    """
    from torch._dynamo.exc import ShortenTraceback

    base = type(exc)
    cls = _THROUGH.get(base)
    if cls is None:
        cls = _THROUGH[base] = type(base.__name__, (base, ShortenTraceback), {
            "__module__": base.__module__, "__qualname__": base.__qualname__,
            "real_stack": property(_no_real_stack, lambda self, value: None)})
    new = BaseException.__new__(cls, *exc.args)
    new.__dict__.update(exc.__dict__)
    new.first_useful_frame = frame
    return new


def _no_real_stack(self: Any) -> Any:
    raise AttributeError("real_stack")
