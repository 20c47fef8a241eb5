"""Every private torch API in dynstep/_compat/ exists on the installed torch (an upgrade breaks here)."""

import torch

from dynstep import _compat


def test_private_apis_exist():
    import torch._dynamo.backends.debugging as dbg
    import torch._inductor.compile_fx as cfx
    from torch._guards import CompileContext

    assert callable(cfx.compile_fx) and callable(cfx.compile_fx_inner)
    assert "inner_compile" in cfx.compile_fx.__code__.co_varnames
    assert callable(dbg.aot_eager) and callable(dbg.boxed_nop)
    assert hasattr(CompileContext, "current_compile_id")
    assert hasattr(torch, "_TorchCompileInductorWrapper")
    assert callable(torch.library._register_effectful_op)
    assert _compat.qualified_name(torch.relu) == "torch.relu"
    assert _compat.has_kernel("aten::add.Tensor", "CPU")


def test_mode_config_matches_torch():
    assert _compat.inductor_config_for_mode(None) == {}
    assert _compat.inductor_config_for_mode("max-autotune-no-cudagraphs")["max_autotune"] is True


def test_dynamo_features_breakpoint_relies_on():
    """One assertion per private Dynamo feature dynstep.breakpoint() uses (see dynstep/_compat/dynamo.py)."""
    seen = {}

    def hook(ctx):
        tx = _compat.comptime_translator(ctx)                      # ComptimeContext -> translator
        seen["parent"] = tx.parent is not None                      # the caller's frame
        seen["locals"] = sorted(tx.parent.symbolic_locals)
        seen["frame"] = tx.parent.frame_summary().name
        seen["tensor"] = _compat.is_tensor_variable(tx.parent.symbolic_locals["y"])
        seen["fake"] = tuple(_compat.fake_of(tx.parent.symbolic_locals["y"]).shape)
        seen["when"] = _compat.function_of_variable(_compat.comptime_local(ctx, "when"))
        seen["const"] = _compat.python_constant(_compat.comptime_local(ctx, "flag"))
        seen["recompile"] = _compat.recompile_reason()
        seen["breaks"] = isinstance(_compat.graph_breaks_so_far(), list)
        seen["shape_guards"] = isinstance(_compat.shape_guards(tx), list)
        frame = _compat.comptime_frame(ctx)                          # the same, as plain data
        seen["trace_frame"] = (frame.function, frame.line, [n for n, _ in frame.locals],
                               [f[2] for f in frame.backtrace], "def forward" in frame.graph_src)

    comptime = _compat.comptime()

    def helper(when=None, flag=True):
        comptime(hook)

    def f(x):
        y = x * 2
        helper(when=lambda y: y.sum() > 0)
        return y

    torch.compile(f, backend="eager", fullgraph=True)(torch.ones(3))
    assert seen["parent"] and seen["frame"] == "f" and {"x", "y"} <= set(seen["locals"])
    assert seen["tensor"] and seen["fake"] == (3,)
    assert callable(seen["when"]) and seen["when"](torch.ones(1)) and seen["const"] == (True, True)
    assert seen["recompile"] is None and seen["breaks"] and seen["shape_guards"]
    function, line, names, backtrace, has_graph = seen["trace_frame"]
    assert function == "f" and line > 0 and {"x", "y"} <= set(names) and backtrace[0] == "f" and has_graph


def test_dynamo_records_an_op_from_a_comptime_hook():
    from dynstep.ops import schema  # noqa: F401  (defines dynstep::breakpoint)

    def hook(ctx):
        tx = _compat.comptime_translator(ctx)
        # the same call dynstep.breakpoint makes: lists of tensor variables and an int
        _compat.call_op_in_trace(tx, torch.ops.dynstep.breakpoint.default,
                                 [[tx.parent.symbolic_locals["y"]], []], 0)

    comptime = _compat.comptime()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: (torch.zeros(2),)   # the graph is inspected, not run

    def helper():
        comptime(hook)

    def f(x):
        y = x + 1
        helper()
        return y

    torch.compile(f, backend=backend, fullgraph=True)(torch.ones(2))
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.ops.dynstep.breakpoint.default in targets


def test_inductor_and_guard_hooks_the_probe_fast_path_and_switch_use():
    """dynstep.probe.fastpath (wrapper codegen registry, add_import_once) and dynstep.probes (a guard
    installed by a backend) on the installed torch; test_fastpath/test_probes check the behaviour."""
    from torch._dynamo.guards import GuardBuilder, install_guard
    from torch._dynamo.source import AttrSource, ImportSource
    from torch._inductor.codegen.custom_extern_kernel_codegen import CUSTOM_EXTERN_KERNEL_CODEGEN, CustomCodegen
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    assert isinstance(CUSTOM_EXTERN_KERNEL_CODEGEN, dict) and CustomCodegen(python=print).python is print
    assert "CUSTOM_EXTERN_KERNEL_CODEGEN" in PythonWrapperCodegen.generate_fallback_kernel.__code__.co_names
    assert "add_import_once" in PythonWrapperCodegen.__init__.__code__.co_names
    assert callable(install_guard) and hasattr(GuardBuilder, "CONSTANT_MATCH")
    assert callable(AttrSource) and callable(ImportSource)  # built only inside a compile (test_probes)
    assert _compat.guard_module_constant("dynstep.probe.switch", "ENABLED") is False  # outside a compile


def test_structured_trace_features_reports_rely_on(tmp_path):
    """dynstep/_compat/trace.py: the trace logger's records, the trace id at compile time, run-time filing."""
    import logging

    from torch._logging._internal import LazyTraceHandler, TorchLogsFormatter, trace_log

    assert trace_log is logging.getLogger(_compat.TRACE_LOGGER)
    seen, handles = [], []

    def backend(gm, example_inputs):
        handles.append(_compat.trace_handle())
        return gm

    handler = LazyTraceHandler(str(tmp_path))
    handler.setFormatter(TorchLogsFormatter(trace=True))
    trace_log.addHandler(handler)
    try:
        with _compat.listening(seen.append):
            assert _compat.file_tracing()
            torch.compile(lambda x: x.cos(), backend=backend)(torch.ones(2))
            _compat.trace_artifact("dynstep_probe_test", lambda: {"ok": 1}, encoding="json", handle=handles[0])
    finally:
        trace_log.removeHandler(handler)
        handler.close()
    assert not _compat.file_tracing()
    start = next(r for r in seen if r.kind == "dynamo_start")
    assert start.compile_id.endswith("/0") and start.stack[-1][0] == __file__
    mine = next(r for r in seen if r.name == "dynstep_probe_test")   # at run time, filed under that compile
    assert mine.compile_id == start.compile_id and '"ok": 1' in mine.payload


def test_what_mixed_mode_debugging_reads():
    """dynstep/_compat/native.py on the installed torch; tests/mixed checks the behaviour."""
    import torch._inductor.config as inductor_config
    from torch._inductor.output_code import CompiledFxGraph

    assert inductor_config.trace.provenance_tracking_level == 0
    assert {"inductor_provenance_mapping_str", "inductor_provenance_stack_traces_str", "current_callable"} <= \
        set(CompiledFxGraph.__annotations__)
    saved = CompiledFxGraph.post_compile
    with _compat.inductor_provenance(lambda facts: None):
        assert inductor_config.trace.provenance_tracking_level == 1 and CompiledFxGraph.post_compile is not saved
    assert inductor_config.trace.provenance_tracking_level == 0 and CompiledFxGraph.post_compile is saved
    (boxed, unboxed, _), where = _compat.dispatcher_kernel("aten::addmm.out", "CPU")
    assert boxed and unboxed and where.startswith("Register")
    assert _compat.op_has_schema("aten::addmm", "out") and not _compat.op_has_schema("aten::no_such_op", "")
    assert _compat.returns_view(torch.ops.aten.t.default) and not _compat.returns_view(torch.ops.aten.mm.default)


def test_distributed_internals_the_coordinator_uses_exist():
    """dynstep/_compat/distributed.py: the default group's store and its collective timeout."""
    from torch.distributed import distributed_c10d as c10d

    assert callable(c10d._get_default_store) and callable(c10d._set_pg_timeout)
    assert callable(c10d._get_default_group)


def test_compiler_bisector_pieces_the_root_cause_drives():
    """dynstep/_compat/bisector.py: CompilerBisector's entry point, state and subsystem table, the hook the
    lowering consults, and the wrapper that applies options and config changes; then one real bisect."""
    from torch._inductor import lowering
    from torch._inductor.compiler_bisector import BACKENDS, CompilerBisector
    from torch._inductor.virtualized import V

    from dynstep._compat import bisector

    assert callable(CompilerBisector.do_bisect) and isinstance(CompilerBisector.__dict__["disable_subsystem"],
                                                                classmethod)
    for name in ("get_backend", "get_subsystem", "get_run_state", "get_system_counter", "in_process_cache"):
        assert hasattr(CompilerBisector, name), name
    names = {s.name for s in BACKENDS["inductor"]}
    assert {"joint_graph_passes", "post_grad_passes", "lowerings", "inductor_fallback_random"} <= names
    assert "decomposition" in {s.name for s in BACKENDS["aot_eager_decomp_partition"]}
    assert hasattr(V, "graph") and bisector.unavailable() is None
    assert torch._TorchCompileInductorWrapper(None, bisector.NO_FUSION, None).config["max_fusion_size"] == 1

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(torch.mul, (graph.call_function(torch.tanh, (x,)), 2.0)),))
    gm, inp = torch.fx.GraphModule(torch.nn.Module(), graph), [torch.randn(8, 8)]
    want = gm(*inp)[0]
    tanh = torch.ops.aten.tanh.default
    original = lowering.lowerings[tanh]
    lowering.lowerings[tanh] = lambda t: lowering.lowerings[torch.ops.aten.add.Tensor](original(t), 1.0)
    try:
        def good(backend: str) -> bool:
            from dynstep.eagerdiff._backends import compile_graph

            return bool(torch.allclose(compile_graph(gm, inp, backend)(*inp)[0], want, atol=1e-5))

        found = bisector.bisect(good)
    finally:
        lowering.lowerings[tanh] = original
    assert (found.backend, found.subsystem, found.op) == ("inductor", "lowerings", "aten.tanh"), found
    assert CompilerBisector.bisection_enabled is False and CompilerBisector.in_process_cache is None


def test_what_the_flight_recorder_reads():
    """dynstep/_compat/flight.py: a tensor's version counter, Inductor's fallback_random, Dynamo's guard functions."""
    import torch._inductor.config as inductor_config

    t = torch.zeros(3)
    before = _compat.tensor_version(t)
    t.add_(1)
    assert _compat.tensor_version(t) == before + 1
    saved = inductor_config.fallback_random
    with _compat.inductor_fallback_random():
        assert inductor_config.fallback_random is True
    assert inductor_config.fallback_random == saved
    # the guard functions Dynamo's C++ guard check calls (and whose exceptions it drops) live in guards.py
    import sys

    import torch._dynamo.guards as guards

    assert callable(getattr(guards.GuardBuilder, "AUTOGRAD_SAVED_TENSORS_HOOKS", None))
    scope: dict = {"sys": sys}
    exec(compile("frame = sys._getframe()", guards.__file__, "exec"), scope)
    assert _compat.in_dynamo_guard(scope["frame"]) and not _compat.in_dynamo_guard(sys._getframe())


def test_what_module_paths_read_from_dynamo():
    """graph/roots.py: Dynamo's root frame while a backend runs, the compiled model on the stack, the
    wrappers unwrapped; the stepper: which torch.compile call runs a graph (dynstep/_compat/roots.py)."""
    seen = {}
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))

    def backend(gm, example_inputs):
        frame = _compat.compiling_frame()
        seen["frame"] = frame is not None and "fn" in frame.f_locals and frame.code.co_name
        seen["model"] = _compat.compiled_model()
        seen["graph"] = _compat.dynamo_graph() is gm.graph           # the whole graph (DDP pieces link to it)
        seen["fakify"] = _compat.fakifies_first_call()
        with _compat.real_first_call():
            seen["real"] = not _compat.fakifies_first_call()

        def run(*args):
            seen["call"] = _compat.running_compile()
            return gm.forward(*args)
        return run

    compiled = torch.compile(model, backend=backend)
    compiled(torch.ones(1, 2))
    assert seen["frame"] and seen["model"] is model and seen["call"] is compiled.dynamo_ctx
    assert seen["graph"] and seen["fakify"] is False and seen["real"]
    assert _compat.unwrap_model(compiled) is model
    assert _compat.compiling_frame() is None and _compat.running_compile() is None and _compat.dynamo_graph() is None
    from torch._dynamo.backends.distributed import DDPOptimizer   # pieces: DDPOptimizer.compile_fn's split
    from torch._guards import TracingContext

    assert callable(DDPOptimizer.compile_fn) and hasattr(TracingContext(None), "fakify_first_call")


def test_what_the_compile_time_prompt_reads():
    """Issue 30: `p EXPR` at dynstep.breakpoint()'s compile-time stop (dynstep/_compat/dynamo.py)."""
    seen = {}

    def hook(ctx):
        frame = _compat.comptime_frame(ctx)
        seen["attempt"] = _compat.compile_attempt(frame.translator) is frame.translator.output
        values = dict((n, _compat.python_value(v)) for n, v in frame.locals)
        seen["values"] = {n: type(v).__name__ for n, (ok, v) in values.items() if ok}
        scope = _compat.compile_scope(ctx, frame)
        seen["graph"] = [n.name for n in scope["graph"].nodes]
        seen["ctx"] = tuple(scope["ctx"].get_local("y").as_fake().shape)
        env = frame.translator.output.shape_env
        before = len(env.guards)
        with _compat.guards_suppressed(frame.translator):
            bool(values["y"][1].shape[0] > 1)
        seen["guards_added"] = len(env.guards) - before

    comptime = _compat.comptime()

    def helper():
        comptime(hook)

    def f(x, k):
        y = x * k
        name = "proj"
        helper()
        return y

    torch.compile(f, backend="eager", dynamic=True, fullgraph=True)(torch.ones(3), 2.0)
    assert seen["attempt"] and seen["values"]["y"] == "FakeTensor" and seen["values"]["name"] == "str"
    assert "y" in seen["graph"] and len(seen["ctx"]) == 1 and seen["guards_added"] == 0


def test_what_the_bytecode_stepper_stages_and_hints_read():
    """Issue 30: compile callbacks (no tracing while compiling), a code object's compile id, pausing
    Dynamo's frame callback at a stop, fresh compiles for --dump, Dynamo's graph-break registry, and
    Inductor's output-code record naming its wrapper module."""
    import sys

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._C._dynamo.eval_frame import get_eval_frame_callback

    seen: list[str] = []
    with _compat.compile_callbacks(lambda: seen.append("start"), lambda: seen.append("end")):
        torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    assert seen[:2] == ["start", "end"]
    codes = _compat.dynamo_output_codes()
    assert codes and _compat.compile_id_of(codes[-1]) == "0/0"
    before = get_eval_frame_callback()
    with _compat.dynamo_paused():
        assert get_eval_frame_callback() is None
    assert get_eval_frame_callback() is before
    with _compat.fresh_compiles():
        assert inductor_config.fx_graph_cache is False and functorch_config.enable_autograd_cache is False
    gb = _compat.graph_break_type("Unsupported Tensor.item() call with capture_scalar_outputs=False")
    assert gb is not None and gb.gb_id == "GB0124" and gb.hints and gb.url.endswith("gb0124.html")
    records = []
    with _compat.listening(records.append):
        with _compat.fresh_compiles():
            torch.compile(lambda x: x.sin() * 2)(torch.ones(3))
    (code,) = [r for r in records if r.kind == "inductor_output_code"]
    assert code.path.endswith(".py") and "def call(" in code.payload
    kinds = {r.kind for r in records} | {r.name for r in records}
    assert {"dynamo_output_graph", "aot_inference_graph", "inductor_post_grad_graph"} <= kinds, kinds
    assert sys.version_info >= (3, 11)


def test_inductor_pieces_the_fused_statistics_rely_on():
    """dynstep/_compat/fusion.py and the compile hooks backends/stats_pass.py uses, on the installed torch."""
    import torch._inductor.config as config
    from torch._guards import TracingContext
    from torch._inductor.output_code import CompiledFxGraph
    from torch._inductor.utils import BoxedBool
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    with mode:
        fake = torch.empty(3)
    assert _compat.fake_mode_of([fake]) is mode and _compat.fake_mode_of([]) is None
    with _compat.in_fake_mode(mode):
        assert _compat.is_fake(torch.empty(2))
    before = (config.max_fusion_size, config.cpp.max_horizontal_fusion_size)
    with _compat.fusion_limits(40):
        assert config.max_fusion_size >= 104 and config.cpp.max_horizontal_fusion_size >= 56
    assert (config.max_fusion_size, config.cpp.max_horizontal_fusion_size) == before
    assert "output_strides" in TracingContext(None).__dict__ and bool(BoxedBool(True))
    assert "source_code" in CompiledFxGraph.__dataclass_fields__ or hasattr(CompiledFxGraph, "source_code")
    seen = []

    def around(gm, is_backward):
        import contextlib

        @contextlib.contextmanager
        def slot():
            box = type("Slot", (), {"compiled": None, "compile_other": None})()
            yield box
            seen.append((is_backward, _compat.kernel_count(box.compiled), box.compile_other is not None))
        return slot()

    compiled = _compat.inductor_with_graph_hooks(*_traced(lambda x: torch.sin(x) + 1, torch.randn(8)), mode=None,
                                                 rewrite=lambda gm, is_backward: gm, around=around)
    assert compiled is not None and seen == [(False, 1, True)]


def _traced(fn, *args):
    gm = torch.fx.symbolic_trace(fn)
    return gm, list(args)
