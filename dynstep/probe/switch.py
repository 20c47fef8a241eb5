"""The run-time switch for every probe: leave probes in a training loop, turn them off for free.

    import dynstep
    dynstep.probes.disable()           # from the next call on, graphs run without probes
    dynstep.probes.enable()
    with dynstep.probes.disabled():    # off inside the block, restored after
        loss = cm(x)
    dynstep.probes.enabled()           # -> bool;  DYNSTEP_PROBES=0 starts with probes off

It covers what superstep inserts as `dynstep::probe` (the `probe` selectors with their gradients,
and the `nan` checks) and hand-placed `TensorProbe`s. Pauses, `dynstep.breakpoint()` and the diff
have their own switches.

Why it costs nothing: a compiled graph is specialised on the switch. While it is off, superstep
compiles the graph exactly as the inner compiler would without dynstep, and in both states it adds
a Dynamo guard on `ENABLED` (Dynamo adds the same guard itself when it traces a `TensorProbe`
call). Flipping the switch fails that guard once and Dynamo compiles the other variant; from then
on both stay in its cache and each call runs the one that matches: a guard check, no probe op and
no fusion lost to a probe. In eager code a disabled `TensorProbe` returns its input at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .. import _compat
from ..core.options import switched_off

ENABLED: bool = not switched_off("DYNSTEP_PROBES")


def enabled() -> bool:
    return ENABLED


def enable() -> None:
    global ENABLED
    ENABLED = True


def disable() -> None:
    """Every probe stops acting; compiled graphs switch to their variant without probes."""
    global ENABLED
    ENABLED = False


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    global ENABLED
    saved = ENABLED
    ENABLED = False
    try:
        yield
    finally:
        ENABLED = saved


PUBLIC_NAME = "dynstep.probes"   # how users reach this module (dynstep/__init__.py); guards say so


def specialize() -> bool:
    """For a backend: the switch's value, with a guard that recompiles the frame when it flips.
    The guard reads ``dynstep.probes.ENABLED``, so a recompile reason names the switch as users do."""
    _compat.guard_module_constant(PUBLIC_NAME, "ENABLED")
    return ENABLED
