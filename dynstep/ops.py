"""The dynstep operators, defined once, with their fake kernels and Python kernels.

    dynstep::probe(Tensor x, int site) -> ()          ORDERED effect: never removed or reordered
    dynstep::grad_tap(Tensor x, int site) -> Tensor   identity whose backward is grad_tap_bw
    dynstep::grad_tap_bw(Tensor g, int site) -> Tensor identity that probes the gradient
    dynstep::pause(Tensor(a!) x, int site, Tensor[] inputs) -> ()
                                                      ORDERED effect, cudagraph_unsafe: a stop of
                                                      the stepper; may write x in place (`set`)

The Python kernels are registered for CompositeExplicitAutograd, so a native kernel registered
for CPU or CUDA (csrc/) takes precedence without changing any caller. The probe op carries no
`cudagraph_unsafe` tag: probes stay inside captured CUDA graphs. The pause op carries it, so
Inductor's graph partitioning cuts a CUDA graph at every pause (each pause costs a graph split).
Its `inputs` are the paused node's tensor inputs, passed only so a stop can show them by name.

    torch.ops.dynstep.probe(x, site_id)
"""

from __future__ import annotations

import torch
import torch.fx.node

from . import _compat

LIB = torch.library.Library("dynstep", "DEF")
LIB.define("probe(Tensor x, int site) -> ()")
LIB.define("grad_tap(Tensor x, int site) -> Tensor")
LIB.define("grad_tap_bw(Tensor g, int site) -> Tensor")
# x is declared mutable (a!): `set value = ...` copies into x and every later node, compiled by
# Inductor or not, reads the new value (functionalization turns this into auto_functionalized).
LIB.define("pause(Tensor(a!) x, int site, Tensor[] inputs) -> ()", tags=(torch.Tag.cudagraph_unsafe,))
# dynstep.breakpoint()'s runtime half: the tensor locals at that line (writable ones may be `set`).
LIB.define("breakpoint(Tensor(a!)[] values, Tensor[] readonly, int bp) -> ()", tags=(torch.Tag.cudagraph_unsafe,))


def _probe_kernel(x: torch.Tensor, site: int) -> None:
    from .runtime import on_probe

    on_probe(x, site)


_fast_wrapper_tried = False


def _probe_fake(x: torch.Tensor, site: int) -> None:
    # Runs while a graph calling the op is traced. Once Inductor's code generator is loaded (it
    # is by the time AOTAutograd traces for Inductor), its wrapper lines call the probe directly.
    global _fast_wrapper_tried
    if not _fast_wrapper_tried and _compat.inductor_codegen_loaded():
        from . import fastpath

        fastpath.install()
        _fast_wrapper_tried = True
    return None


_on_pause = None


def _pause_kernel(x: torch.Tensor, site: int, inputs: list[torch.Tensor]) -> None:
    global _on_pause
    if _on_pause is None:
        from .stepper import on_pause

        _on_pause = on_pause
    _on_pause(x, site, inputs)


def _pause_fake(x: torch.Tensor, site: int, inputs: list[torch.Tensor]) -> None:
    return None


def _breakpoint_kernel(values: list[torch.Tensor], readonly: list[torch.Tensor], bp: int) -> None:
    from .breakpoints import on_breakpoint

    on_breakpoint(values, readonly, bp)


def _breakpoint_fake(values: list[torch.Tensor], readonly: list[torch.Tensor], bp: int) -> None:
    return None


def _grad_tap_kernel(x: torch.Tensor, site: int) -> torch.Tensor:
    return x.clone()


def _grad_tap_bw_kernel(g: torch.Tensor, site: int) -> torch.Tensor:
    from .runtime import on_probe

    on_probe(g, site)
    return g.clone()


def _like(x: torch.Tensor, site: int) -> torch.Tensor:
    return torch.empty_like(x)


def _grad_tap_setup(ctx, inputs, output) -> None:
    ctx.site = inputs[1]


def _grad_tap_backward(ctx, grad: torch.Tensor):
    return torch.ops.dynstep.grad_tap_bw(grad, ctx.site), None


LIB.impl("probe", _probe_kernel, "CompositeExplicitAutograd")
LIB.impl("pause", _pause_kernel, "CompositeExplicitAutograd")
LIB.impl("breakpoint", _breakpoint_kernel, "CompositeExplicitAutograd")
LIB.impl("grad_tap", _grad_tap_kernel, "CompositeExplicitAutograd")
LIB.impl("grad_tap_bw", _grad_tap_bw_kernel, "CompositeExplicitAutograd")
torch.library.register_fake("dynstep::probe", _probe_fake, lib=LIB)
torch.library.register_fake("dynstep::pause", _pause_fake, lib=LIB)
torch.library.register_fake("dynstep::breakpoint", _breakpoint_fake, lib=LIB)
torch.library.register_fake("dynstep::grad_tap", _like, lib=LIB)
torch.library.register_fake("dynstep::grad_tap_bw", _like, lib=LIB)
torch.library.register_autograd("dynstep::grad_tap", _grad_tap_backward, setup_context=_grad_tap_setup,
                                lib=LIB)
_compat.register_ordered_effect("dynstep::probe")
_compat.register_ordered_effect("dynstep::pause")
_compat.register_ordered_effect("dynstep::breakpoint")
# A probe inserted after partitioning has no effect token; this keeps FX dead-code elimination
# from dropping it (torch/fx/node.py: has_side_effect).
torch.fx.node.has_side_effect(torch.ops.dynstep.probe.default)
torch.fx.node.has_side_effect(torch.ops.dynstep.pause.default)
torch.fx.node.has_side_effect(torch.ops.dynstep.breakpoint.default)

probe = torch.ops.dynstep.probe.default
grad_tap = torch.ops.dynstep.grad_tap.default
pause = torch.ops.dynstep.pause.default
grad_tap_bw = torch.ops.dynstep.grad_tap_bw.default


def _load_native() -> None:
    # Registers the CPU kernel (csrc/probe_cpu.cpp) over the Python one when it builds; the
    # outcome is in dynstep.native.status() and `dynstep doctor`.
    from . import native

    native.load()


_load_native()


def registered_kernels() -> dict[str, list[str]]:
    """Which dispatch keys have a kernel for each dynstep op (for `dynstep doctor`)."""
    keys = ["CPU", "CUDA", "CompositeExplicitAutograd", "Meta"]
    out = {}
    for name in ("probe", "pause", "grad_tap", "grad_tap_bw"):
        qual = f"dynstep::{name}"
        out[name] = [k for k in keys if _compat.has_kernel(qual, k)]
    return out
