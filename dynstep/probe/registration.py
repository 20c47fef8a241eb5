"""Registering the probe ops' kernels under the op schema, and wiring the probe package's parts, once.

`ensure()` registers the Python kernels of `dynstep::probe`, `grad_tap`, `grad_tap_bw` and `publish`
(CompositeExplicitAutograd), loads the native kernel (csrc/, best effort: `dynstep doctor` says why
not) and mirrors sites into it, connects the sessions as the destination of hits, and asks to be
told when Inductor traces a probe so its wrapper calls the probe directly (`dynstep.probe.fastpath`).
Every path that puts a probe into a graph calls it first: superstep's probe pass, `TensorProbe`,
and the generated code's `dynstep.fastpath` import.

    from dynstep.probe import registration
    registration.ensure()
"""

from __future__ import annotations

import torch

from ..core.once import once
from ..ops import native, schema
from . import fastpath, fused, rings, runtime, sessions

def _probe_batched(info, in_dims, x: torch.Tensor, site: int):
    """Under torch.vmap: probe the whole batch at once (its batch dimension first); no output."""
    if in_dims[0] not in (None, 0):
        x = x.movedim(in_dims[0], 0).contiguous()   # the batch's layout is vmap's, not the user's
    torch.ops.dynstep.probe(x, site)
    return None, None


def _grad_tap(x: torch.Tensor, site: int) -> torch.Tensor:
    return x.clone()


def _grad_tap_bw(g: torch.Tensor, site: int) -> torch.Tensor:
    runtime.on_probe(g, site)
    return g.clone()


@once
def ensure() -> None:
    """Register and connect everything a probe needs at run time (the first call; then a no-op)."""
    schema.impl("probe", runtime.on_probe)
    schema.impl("grad_tap", _grad_tap)
    schema.impl("grad_tap_bw", _grad_tap_bw)
    schema.impl("publish", fused.on_publish)
    torch.library.register_vmap("dynstep::probe", _probe_batched, lib=schema.LIB)
    runtime.connect(destination=sessions.DESTINATION)
    # while a graph calling the probe is traced: once Inductor's code generator is loaded (it is
    # by the time AOTAutograd traces for Inductor), its wrapper lines call the probe directly
    schema.on_trace("probe", fastpath.install_when_inductor_loaded)
    module = native.load()
    if module is not None:
        rings.attach_native(module)
        module.set_publish_callbacks(fused.published, fused.on_publish)
        fastpath.bind(module.probe, module.publish)
