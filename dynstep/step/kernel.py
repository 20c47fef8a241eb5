"""The stepper's kernels under the op schema, and its connection to the probe runtime, done once.

`ensure()` registers the Python kernel of `dynstep::pause` (the stepper's stop points) and tells
the probe runtime who stops for a gradient pause or `nan="stop"`. The pause pass calls it before
it puts a pause into a graph (`dynstep::breakpoint`'s kernel is registered by
`dynstep.step.breakpoints`, its owner).

    from dynstep.step import kernel
    kernel.ensure()
"""

from __future__ import annotations

from ..core.once import once
from ..ops import schema
from ..probe import kernel as probe_kernel
from ..probe import runtime
from .stepper import STOPPER, on_pause

@once
def ensure() -> None:
    """Register the pause kernel and connect the stepper to the probe runtime (the first call)."""
    probe_kernel.ensure()   # a graph with stop points may hold probes (grads, nan) too
    schema.impl("pause", on_pause)
    runtime.connect(stopper=STOPPER)
