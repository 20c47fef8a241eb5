"""Registering the stepper's kernel under the op schema, and connecting it to the probe runtime, once.

`ensure()` registers the Python kernel of `dynstep::pause` (the stepper's stop points) and tells
the probe runtime who stops for a gradient pause or `nan="stop"`. The pause pass calls it before
it puts a pause into a graph (`dynstep::breakpoint`'s kernel is registered by
`dynstep.step.breakpoints`, its owner).

    from dynstep.step import registration
    registration.ensure()
"""

from __future__ import annotations

from ..core.once import once
from ..ops import schema
from ..probe import registration as probe_registration
from ..probe import runtime
from .stepper import STOPPER, on_pause

@once
def ensure() -> None:
    """Register the pause kernel and connect the stepper to the probe runtime (the first call)."""
    probe_registration.ensure()   # a graph with stop points may hold probes (grads, nan) too
    schema.impl("pause", on_pause)
    runtime.connect(stopper=STOPPER)
