"""The `superstep` torch.compile backend: probes, pauses and diffs inside compiled graphs.

    torch.compile(model, backend="superstep")                      # transparent: plain Inductor
    torch.compile(model, backend="superstep", options={"pause": ["module:blocks.2.attn"]})  # stop there
    torch.compile(model, backend="superstep",
                  options={"inner": "inductor", "probe": ["module:blocks.*.mlp", "op:layer_norm"],
                           "actions": ["summary", "record"], "record": 16, "grads": True})
    dynstep.superstep(probe=["line:model.py:57"], inner="aot_eager")   # the same, as a callable

The name `superstep` is registered through the `torch_dynamo_backends` entry point, so no import
is needed. With no options the graph goes to the inner compiler untouched.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch.fx

from dynstep import _compat
from dynstep.core.errors import OptionsError, SelectorError
from dynstep.core.options import Options, check_environment
from dynstep.graph import info as gi
from dynstep.graph import selectors as sel
from dynstep.probe import switch
from dynstep.recording import plans
from dynstep.recording.compile_log import COMPILE_LOG

from dynstep.compilers import inner as inner_mod
from . import pause_pass, probe_pass, stats_pass


def superstep_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
                      options: Mapping[str, Any] | None = None, mode: str | None = None) -> Callable[..., Any]:
    """The function torch.compile calls (``backend="superstep"``).

    torch.compile keeps `options` until the first call compiles, so that is where they are checked;
    a bad option or selector reaches the caller as itself (OptionsError / SelectorError, both
    ValueErrors), not wrapped in Dynamo's BackendCompilerFailed. `dynstep.superstep(**options)`
    checks them when it is made.
    """
    try:
        check_environment()    # every DYNSTEP_* variable against its row (core/options.py), named when bad
        opts = checked(Options.from_mapping(options, mode=mode))
        with pause_pass.commands_of(_commands_owner(options)):
            return compile_graph(gm, example_inputs, opts)
    except (OptionsError, SelectorError) as exc:
        raise _compat.through_dynamo(exc, inspect.currentframe()) from None


def _commands_owner(options: Mapping[str, Any] | None) -> bool:
    """Scripted `commands` given in a torch.compile call's options belong to that call (Stepper.configure);
    from DYNSTEP_COMMANDS (`dynstep run --commands`) they are one script for the run."""
    return bool(options and options.get("commands"))


def checked(opts: Options) -> Options:
    """Options whose selectors parse (the grammar is in the error), or a SelectorError naming the option."""
    for name in ("probe", "pause"):
        for text in getattr(opts, name):
            try:
                sel.parse(text)
            except SelectorError as exc:
                raise SelectorError(f"superstep option {name!r} (or DYNSTEP_{name.upper()}): {exc}") from None
    for text in opts.flight.select if opts.flight is not None else ():
        try:
            sel.parse(text)
        except SelectorError as exc:
            raise SelectorError(f"superstep option 'flight' 'select' (or DYNSTEP_FLIGHT_SELECT): {exc}") from None
    return opts


@dataclasses.dataclass(frozen=True)
class CompilePlan:
    """What superstep does with one graph, decided once when the compile starts (`plan_of`) and then
    only read: the options (after the probe switch), whether the graph gets stop points (`pauses`:
    pause selectors, `step`, or a front end that asked for stop points everywhere, read from the
    stepper here and nowhere else) and whether its stops need a stepper (`can_stop`)."""

    opts: Options
    everywhere: bool        # stop points in every graph (a front end asked: pause_pass.stop_points_everywhere)
    pauses: bool
    can_stop: bool          # pauses, or nan="stop"

    @property
    def plain(self) -> bool:
        """Nothing to place: the inner compiler gets the graph untouched."""
        return self.opts.transparent and not self.pauses


def plan_of(opts: Options) -> CompilePlan:
    if (opts.probe or opts.nan or opts.flight) and not switch.specialize():
        # dynstep.probes.disable(): this variant has no probe at all (a guard recompiles on a flip)
        opts = dataclasses.replace(opts, probe=(), nan=None, flight=None)
    everywhere = pause_pass.stop_points_everywhere()
    pauses = pause_pass.wants_pauses(opts, everywhere)
    return CompilePlan(opts, everywhere=everywhere, pauses=pauses, can_stop=pauses or opts.nan == "stop")


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], opts: Options) -> Callable[..., Any]:
    if os.environ.get("DYNSTEP_DAP"):   # serve the Debug Adapter Protocol from the first compile on
        from dynstep.dap.api import serve_from_env

        serve_from_env()
    if opts.diff:
        with gi.naming(gm):
            return _with_diff(gm, example_inputs, opts)
    plan = plan_of(opts)
    if plan.plain:
        return _plain(gm, example_inputs, plan.opts)
    with _kernel_provenance(plan), gi.naming(gm):
        return _compile_instrumented(gm, example_inputs, plan)


def _kernel_provenance(plan: CompilePlan) -> contextlib.AbstractContextManager[None]:
    """A graph the stepper can stop in is compiled with Inductor's node -> kernel provenance, so
    `native` at a stop names the kernel. Its cost: the compile keeps node metadata (1-2% more compile
    CPU time, docs/mixed-mode.md) and a different FX-cache key; run time and kernels unchanged."""
    if plan.can_stop and plan.opts.inner == "inductor":
        from dynstep.mixed.provenance import tracking

        return tracking(group="superstep")
    return contextlib.nullcontext()


def _compile_instrumented(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                          plan: CompilePlan) -> Callable[..., Any]:
    opts = plan.opts
    graph_id = gi.graph_id(gm, _compat.current_compile_id())
    COMPILE_LOG.set_handle(graph_id, _compat.trace_handle())   # where its run-time artifacts go
    if plan.can_stop:    # `code STAGE` at its stops (dynstep.stages)
        from dynstep.stages.capture import STAGES

        STAGES.keep(_compat.current_compile_id(), lambda: gm.print_readable(print_output=False),
                    graph_id.rpartition("[")[0])
    mark = plans.sites_so_far()
    compiled = _instrumented(gm, example_inputs, plan, graph_id)
    _publish_plan(gm, graph_id, opts, mark)
    return compiled


def _instrumented(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], plan: CompilePlan,
                  graph_id: str) -> Callable[..., Any]:
    opts = plan.opts
    if plan.can_stop:
        pause_pass.configure_stepper(opts)
    if plan.pauses:
        compiled = _with_pauses(gm, example_inputs, plan, graph_id)
        if compiled is not None:
            return compiled
    return _with_probes(gm, example_inputs, opts, graph_id)


def _with_diff(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], opts: Options) -> Callable[..., Any]:
    """Diff the graph as Dynamo gave it (before any probe), then run it as the other options say;
    the diff's report goes into the structured trace under this compile (tlparse shows it)."""
    from dynstep.eagerdiff.api import superstep_diff

    handle = _compat.trace_handle()
    reference = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    compiled = compile_graph(gm, example_inputs, dataclasses.replace(opts, diff=False))
    return superstep_diff(reference, example_inputs, opts.inner, opts.mode, compiled=compiled,
                          on_report=lambda report: _compat.trace_artifact(
                              "dynstep_diff", report.to_dict, encoding="json", handle=handle))


def _publish_plan(gm: torch.fx.GraphModule, graph_id: str, opts: Options, mark: int) -> None:
    """What was placed where: into the compile log (recordings, reports) and the structured trace."""
    plan = plans.plan_of(gm, graph_id, _compat.current_compile_id(), opts, after=mark)
    if not any(row.sites for row in plan.rows):
        return
    COMPILE_LOG.add(plan)
    _compat.trace_artifact("dynstep_plan", lambda: plans.plan_json(plan), encoding="json")
    _compat.trace_artifact("dynstep_instrumented_graph", lambda: gm.print_readable(print_output=False))
    _compat.trace_artifact("dynstep_source_map", lambda: plans.source_map(plan), encoding="json")


def _plain(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], opts: Options) -> Callable[..., Any]:
    return inner_mod.compile_plain(gm, example_inputs, opts.inner, mode=opts.mode)


def _with_pauses(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], compile_plan: CompilePlan,
                 graph_id: str) -> Callable[..., Any] | None:
    """Stop points (before the probes: a probe on the same node then sees the value as computed).

    A pause-only graph compiles twice, with and without stop points, and runs the variant the
    stepper needs per call; otherwise the probes go into the same graph (None: carry on)."""
    opts = compile_plan.opts
    pause_only = not (opts.probe or opts.diff or opts.nan or opts.grads or opts.flight)
    quiet = pause_pass.copy_graph_module(gm) if pause_only else None
    plan = pause_pass.PausePlan.build(opts, graph_id, everywhere=compile_plan.everywhere)
    sites = pause_pass.insert_pauses(gm, plan)
    if quiet is not None:
        if not sites:   # no stop point matched here: compiled exactly as without superstep
            return _plain(gm, example_inputs, opts)
        from dynstep.step.variants import two_variants

        return two_variants(_plain(gm, example_inputs, opts), _plain(quiet, example_inputs, opts), sites)
    if opts.grads:
        probe_pass.insert_grad_pauses(gm, plan.selectors, graph_id)
    return None


def _with_probes(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], opts: Options,
                 graph_id: str) -> Callable[..., Any]:
    hooked = inner_mod.has_aot_hooks(opts.inner)
    flight = None
    if opts.flight is not None:   # first: it keeps the graph as Dynamo gave it, for a replay
        from . import flight_pass

        flight = flight_pass.instrument(gm, opts, graph_id, inner_has_aot=hooked)
    plan = probe_pass.ProbePlan.build(opts, graph_id, inner_has_aot=hooked)
    if not hooked:
        probe_pass.warn_aten_without_aot(plan, opts.inner_name)
    sites = probe_pass.insert_probes(gm, plan, aten_level=False)
    compiled = _compile_probed(gm, example_inputs, opts, plan, sites)
    return compiled if flight is None else flight_pass.wrap(compiled, flight)


def _compile_probed(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], opts: Options,
                    plan: probe_pass.ProbePlan, sites: list) -> Callable[..., Any]:
    hooked = plan.inner_has_aot
    if opts.inner == "eager":
        return probe_pass.direct_probe_calls(gm).forward
    if not hooked:
        return _plain(gm, example_inputs, opts)
    rewrite = functools.partial(probe_pass.rewrite_partitioned, plan=plan)
    if opts.inner == "aot_eager" and _compat.fakifies_first_call():   # a piece of DDP's split graph
        with _compat.real_first_call():   # its first call runs under fake tensors: probes as ops
            return inner_mod.compile_hooked(gm, example_inputs, opts.inner, mode=opts.mode,
                                            rewrite=lambda g, is_backward: rewrite(g, is_backward=is_backward))
    if opts.inner == "aot_eager":  # Python runs these graphs: no token per probe, no dispatcher
        return inner_mod.compile_hooked(gm, example_inputs, opts.inner, mode=opts.mode,
                                        rewrite=lambda g, is_backward: probe_pass.direct_probe_calls(
                                            rewrite(g, is_backward=is_backward)))
    lowering = stats_pass.Lowering(plan.graph_id)   # summary probes computed inside Inductor's kernels
    compiled = inner_mod.compile_hooked(gm, example_inputs, opts.inner, mode=opts.mode,
                                        rewrite=lambda g, is_backward: lowering.rewrite(
                                            rewrite(g, is_backward=is_backward), is_backward),
                                        around=lowering.around)
    return _checked_after_replay(compiled, sites, opts, example_inputs)


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def _checked_after_replay(compiled: Callable[..., Any], sites: list, opts: Options,
                          example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """`nan` checks inside a replayed CUDA graph cannot enter Python: the device flags non-finite
    values and, after each call, the first flagged node in graph order is reported as outside
    capture (this synchronizes the device once per call, in nan mode only). A NaN in a gradient is
    reported at the next call."""
    nan_sites = [s.id for s in sites if "nan" in s.actions]
    on_cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)
    if not (nan_sites and on_cuda and opts.mode in CUDA_GRAPH_MODES):
        return compiled
    from dynstep.probe import rings

    def after(out: Any) -> Any:
        torch.cuda.synchronize()
        rings.raise_first_nonfinite(nan_sites)
        return out

    def checked(*args: Any) -> Any:
        # Called exactly as the caller calls `compiled` (one list when Dynamo honours
        # `_boxed_call`, spread out otherwise: torch 2.11's Dynamo calls AOT's forward so), and
        # passed on unchanged: a transparent wrapper, whatever calling convention this torch uses.
        return after(compiled(*args))

    if getattr(compiled, "_boxed_call", False):
        checked._boxed_call = True  # type: ignore[attr-defined]
    return checked


def superstep(**options: Any) -> Callable[..., Any]:
    """``dynstep.superstep(**options)``: the same backend as a callable, options bound (and checked now)."""
    opts = checked(Options.from_mapping(options))

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
        try:
            with pause_pass.commands_of(_commands_owner(options)):
                if kwargs.get("mode") and not opts.mode:
                    return compile_graph(gm, example_inputs, Options.from_mapping({**options, "mode": kwargs["mode"]}))
                return compile_graph(gm, example_inputs, opts)
        except (OptionsError, SelectorError) as exc:
            raise _compat.through_dynamo(exc, inspect.currentframe()) from None

    backend.__name__ = "superstep"
    return backend
