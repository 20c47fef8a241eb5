"""Every private torch API dynstep touches, in one place, each with the upstream file it reads.

When torch changes one of these, this package is the only place to edit; `tests/test_compat.py`
checks each one exists on the installed torch so an upgrade breaks loudly. What it returns is
plain data or a small wrapper (`TraceFrame`, `GuardEntry`); where a private object must travel
(a Dynamo variable, a translator) it is an opaque handle that only this package reads.

    fx         FX, the dispatcher, effects, pytree
    dynamo     compile ids, backends, comptime (dynstep.breakpoint), guards, the user-compiler hook
    backend    Inductor and AOTAutograd hooks, generated code, the wrapper codegen registry
    fusion     fused summary statistics: fake values of added nodes, Inductor's fusion limits, kernel counts
    bytecode   the bytecode stepper's hooks into Dynamo
    trace      the structured trace (TORCH_TRACE, tlparse): listening to it, writing artifacts into it
    native     mixed-mode debugging: Inductor's provenance, the dispatcher's kernel table, fake replay
    distributed  the default process group's store and collective timeout (dynstep.jobs)
    flight     tensor version counters, Inductor's fallback_random, whether a Dynamo guard check runs (dynstep.flight)
    roots      the frame Dynamo compiles and the model torch.compile was given (module paths)
    explain    Dynamo's registry of graph-break types: ids, explanations, hints, documentation pages
    stages     compiles that produce every stage (`dynstep run --dump`)
"""

from __future__ import annotations

from .bytecode import (BYTECODE_HOOKS, GuardEntry, bytecode_hook_missing, bytecode_hooks_missing, cache_entries,
                       compile_callbacks, compile_id_of,
                       dynamo_output_codes, frame_value_stack, guard_entries, original_code, recompile_reasons,
                       register_dynamo_bytecode_hook, set_dynamo_code_callback)
from .dynamo import (call_op_in_trace, compile_attempt, compile_scope, comptime, comptime_frame, comptime_local,
                     comptime_translator, current_compile_id, dynamo_paused, fake_of, fakifies_first_call,
                     function_of_variable, graph_breaks_so_far, guard_module_constant, guards_suppressed,
                     input_local_name, is_tensor_variable, lookup_backend, python_constant, python_value,
                     real_first_call, realize, recompile_reason, shape_guards, symbolic_value, through_dynamo,
                     TraceFrame, wrap_dynamo_compiler)
from .fx import (effect_of, has_kernel, is_fake, is_op, is_op_overload, print_options, qualified_name,
                 register_ordered_effect, restore_print_options, tree_leaves, with_effects_op)
from .backend import (WRAPPER_CODEGEN_MODULE, aot_eager_with_graph_hooks, extern_kernel_args,
                       inductor_cache_dir, inductor_codegen_loaded, inductor_config_for_mode, inductor_output_code,
                       inductor_plain, inductor_with_graph_hooks, register_wrapper_codegen, run_and_get_code,
                       wrapper_import)
from .fusion import fake_mode_of, fusion_limits, in_fake_mode, kernel_count
from .distributed import default_store, pg_timeout, set_pg_timeout
from .flight import in_dynamo_guard, inductor_fallback_random, tensor_version
from .roots import RootFrame, compiled_model, compiling_frame, dynamo_graph, running_compile, unwrap_model
from .explain import GraphBreakType, graph_break_type
from .stages import fresh_compiles
from .trace import TRACE_LOGGER, TraceRecord, add_listener, file_tracing, listening, trace_artifact, trace_handle
from .native import (CompiledGraphFacts, aten_ops_of_node, dispatcher_kernel, inductor_provenance, op_has_schema,
                     returns_view)

__all__ = [
    "add_listener", "aot_eager_with_graph_hooks", "aten_ops_of_node", "bytecode_hook_missing", "BYTECODE_HOOKS",
    "bytecode_hooks_missing", "cache_entries", "call_op_in_trace", "compile_attempt", "compile_callbacks",
    "compile_id_of", "compile_scope", "compiled_model", "CompiledGraphFacts", "compiling_frame", "comptime",
    "comptime_frame", "comptime_local", "comptime_translator", "current_compile_id", "default_store",
    "dispatcher_kernel", "dynamo_graph", "dynamo_output_codes", "dynamo_paused", "effect_of", "extern_kernel_args",
    "fake_mode_of", "fake_of", "fakifies_first_call", "file_tracing", "frame_value_stack", "fresh_compiles",
    "function_of_variable", "fusion_limits", "graph_break_type", "graph_breaks_so_far", "GraphBreakType",
    "guard_entries", "guard_module_constant", "GuardEntry", "guards_suppressed", "has_kernel", "in_dynamo_guard",
    "in_fake_mode",
    "inductor_cache_dir", "inductor_codegen_loaded", "inductor_config_for_mode", "inductor_fallback_random",
    "inductor_output_code", "inductor_plain", "inductor_provenance", "inductor_with_graph_hooks",
    "input_local_name", "is_fake", "is_op", "is_op_overload", "is_tensor_variable", "kernel_count", "listening",
    "lookup_backend", "op_has_schema", "original_code", "pg_timeout", "print_options", "python_constant",
    "python_value", "qualified_name", "real_first_call", "realize", "recompile_reason", "recompile_reasons",
    "register_dynamo_bytecode_hook", "register_ordered_effect", "register_wrapper_codegen", "restore_print_options",
    "returns_view", "RootFrame", "run_and_get_code", "running_compile", "set_dynamo_code_callback",
    "set_pg_timeout", "shape_guards", "symbolic_value", "tensor_version", "through_dynamo", "trace_artifact",
    "trace_handle", "TRACE_LOGGER", "TraceFrame", "TraceRecord", "tree_leaves", "unwrap_model", "with_effects_op",
    "wrap_dynamo_compiler", "WRAPPER_CODEGEN_MODULE", "wrapper_import"
]
