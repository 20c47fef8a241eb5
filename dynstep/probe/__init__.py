"""Run-time probes: what a probe does when it fires (`runtime`), native rings and the record memory
cap (`rings`), statistics (`stats`), the direct call from Inductor's wrapper (`fastpath`), sessions
(`sessions`: they write recordings through `dynstep.recording`), `TensorProbe` (`api`), the on/off
switch (`switch`) and registering the probe ops' kernels (`registration`)."""

from typing import Any


def __getattr__(name: str) -> Any:
    # `from dynstep.probe import kernel`: the old name of `registration`, still written by files
    # other branches of this wave edit (backends/probe_pass.py, bench/probe_overhead.py); issue 27
    # item 8: remove once they name `registration`
    if name == "kernel":
        from . import registration

        return registration
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
