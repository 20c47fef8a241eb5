"""The dynstep operators, defined once: schemas, fake kernels, effects. No kernel, no side effect
beyond torch's op registry.

    dynstep::probe(Tensor x, int site) -> ()          ORDERED effect: never removed or reordered
    dynstep::grad_tap(Tensor x, int site) -> Tensor   identity whose backward is grad_tap_bw
    dynstep::grad_tap_bw(Tensor g, int site) -> Tensor identity that probes the gradient
    dynstep::pause(Tensor(a!) x, int site, Tensor[] inputs) -> ()
                                                      ORDERED effect, cudagraph_unsafe: a stop of
                                                      the stepper; may write x in place (`set`)
    dynstep::breakpoint(Tensor(a!)[] values, Tensor[] readonly, int bp) -> ()
                                                      dynstep.breakpoint()'s run-time half
    dynstep::publish(Tensor[] stats, int[] sites, SymInt[] shapes, int[] ranks, int[] dtypes) -> ()
                                                      ORDERED effect: summary statistics that
                                                      Inductor's kernels computed (fused probes,
                                                      backends/stats_pass.py), one hit per site

Kernels are added by their owners with `impl(name, fn)` (torchao's rule: schema and fake kernel
here, kernels where their behaviour lives): the probe kernels by `dynstep.probe.registration`, the
pause and breakpoint kernels by `dynstep.step.registration` and `.breakpoints`, native ones by csrc/ (a CPU or CUDA kernel
registered natively takes precedence over the Python one at CompositeExplicitAutograd, without
changing any caller). The probe op carries no `cudagraph_unsafe` tag: probes stay inside captured
CUDA graphs. The pause op carries it, so Inductor's graph partitioning cuts a CUDA graph at every
pause. Its `inputs` are the paused node's tensor inputs, passed only so a stop can show them.

    from dynstep.ops import schema
    schema.impl("probe", my_kernel)               # CompositeExplicitAutograd
    schema.on_trace("probe", hook)                # hook() runs when a graph calling probe is traced
    torch.ops.dynstep.probe(x, site_id)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx.node

from .. import _compat

LIB = torch.library.Library("dynstep", "DEF")
LIB.define("probe(Tensor x, int site) -> ()")
LIB.define("grad_tap(Tensor x, int site) -> Tensor")
LIB.define("grad_tap_bw(Tensor g, int site) -> Tensor")
# x is declared mutable (a!): `set value = ...` copies into x and every later node, compiled by
# Inductor or not, reads the new value (functionalization turns this into auto_functionalized).
LIB.define("pause(Tensor(a!) x, int site, Tensor[] inputs) -> ()", tags=(torch.Tag.cudagraph_unsafe,))
LIB.define("breakpoint(Tensor(a!)[] values, Tensor[] readonly, int bp) -> ()", tags=(torch.Tag.cudagraph_unsafe,))
# The statistics of several probed values, computed as reductions inside the compiled kernels: per
# site, in `sites` order, the float64 sum and sum of squares of its finite values, their min and max
# (in the value's dtype), and for floating dtypes the NaN count and the non-finite count; `shapes` is
# every value's shape one after the other (`ranks` says how many dims each has), `dtypes` their
# c10 ScalarType codes (dynstep/probe/fused.py). No cudagraph_unsafe tag: it stays in captured graphs.
LIB.define("publish(Tensor[] stats, int[] sites, SymInt[] shapes, int[] ranks, int[] dtypes) -> ()")

OPS = ("probe", "grad_tap", "grad_tap_bw", "pause", "breakpoint", "publish")
_trace_hooks: dict[str, list[Callable[[], None]]] = {name: [] for name in OPS}
_impls: set[str] = set()


def impl(name: str, kernel: Callable[..., object]) -> bool:
    """Register an owner's Python kernel (CompositeExplicitAutograd) once; False if already done."""
    if name in _impls:
        return False
    LIB.impl(name, kernel, "CompositeExplicitAutograd")
    _impls.add(name)
    return True


def on_trace(name: str, hook: Callable[[], None]) -> None:
    """Run `hook()` whenever a graph calling dynstep::<name> is traced (its fake kernel runs)."""
    if hook not in _trace_hooks[name]:
        _trace_hooks[name].append(hook)


def _fire(name: str) -> None:
    for hook in _trace_hooks[name]:
        hook()


def _probe_fake(x: torch.Tensor, site: int) -> None:
    _fire("probe")
    return None


def _publish_fake(stats: list[torch.Tensor], sites: list[int], shapes: list, ranks: list[int],
                  dtypes: list[int]) -> None:
    return None


def _pause_fake(x: torch.Tensor, site: int, inputs: list[torch.Tensor]) -> None:
    return None


def _breakpoint_fake(values: list[torch.Tensor], readonly: list[torch.Tensor], bp: int) -> None:
    return None


def _like(x: torch.Tensor, site: int) -> torch.Tensor:
    return torch.empty_like(x)


def _grad_tap_setup(ctx, inputs, output) -> None:
    ctx.site = inputs[1]


def _grad_tap_backward(ctx, grad: torch.Tensor):
    return torch.ops.dynstep.grad_tap_bw(grad, ctx.site), None


torch.library.register_fake("dynstep::probe", _probe_fake, lib=LIB)
torch.library.register_fake("dynstep::pause", _pause_fake, lib=LIB)
torch.library.register_fake("dynstep::breakpoint", _breakpoint_fake, lib=LIB)
torch.library.register_fake("dynstep::publish", _publish_fake, lib=LIB)
torch.library.register_fake("dynstep::grad_tap", _like, lib=LIB)
torch.library.register_fake("dynstep::grad_tap_bw", _like, lib=LIB)
torch.library.register_autograd("dynstep::grad_tap", _grad_tap_backward, setup_context=_grad_tap_setup,
                                lib=LIB)
for _name in ("probe", "pause", "breakpoint", "publish"):
    _compat.register_ordered_effect(f"dynstep::{_name}")
# A probe inserted after partitioning has no effect token; this keeps FX dead-code elimination
# from dropping it (torch/fx/node.py: has_side_effect).
torch.fx.node.has_side_effect(torch.ops.dynstep.probe.default)
torch.fx.node.has_side_effect(torch.ops.dynstep.pause.default)
torch.fx.node.has_side_effect(torch.ops.dynstep.breakpoint.default)
torch.fx.node.has_side_effect(torch.ops.dynstep.publish.default)

probe = torch.ops.dynstep.probe.default
grad_tap = torch.ops.dynstep.grad_tap.default
pause = torch.ops.dynstep.pause.default
grad_tap_bw = torch.ops.dynstep.grad_tap_bw.default
breakpoint_op = torch.ops.dynstep.breakpoint.default
publish = torch.ops.dynstep.publish.default


def registered_kernels() -> dict[str, list[str]]:
    """Which dispatch keys have a kernel for each dynstep op (for `dynstep doctor`)."""
    keys = ["CPU", "CUDA", "CompositeExplicitAutograd", "Meta"]
    return {name: [k for k in keys if _compat.has_kernel(f"dynstep::{name}", k)] for name in OPS}
