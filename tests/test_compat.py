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
