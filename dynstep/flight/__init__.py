"""The flight recorder: cheap per-node statistics always on in training, dumped with the lead-up when
something goes wrong (docs/flight.md).

    cm = torch.compile(model, backend="superstep", options={"flight": True})
    # or {"flight": {"steps": 64, "on": ["nonfinite", "spike:loss"], "path": "dumps/", "select": ["module:**"]}}
    for batch in data:
        loss = loss_fn(cm(batch)); loss.backward(); opt.step(); opt.zero_grad()
        dynstep.flight.watch("loss", loss)          # a scalar a spike rule can watch
    dynstep.flight.dump()                           # write the rings now

    rec = dynstep.load(path); rec.trigger.kind, rec.trigger.step, rec.trigger.node, rec.trigger.source
    $ dynstep report DUMP          # the lead-up: per-module curves, the trigger marked
    $ dynstep flight replay DUMP   # re-run the trigger's graph call: eager vs compiled, every node probed
    result = dynstep.flight.replay(dump); result.reproduced, result.verdict
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import DynstepError
from ..recording.flight_facts import FlightInfo, Trigger
from .recorder import FlightRecorder, current, stop

__all__ = ["FlightInfo", "FlightRecorder", "Trigger", "current", "dump", "replay", "stop", "watch"]


def watch(name: str, scalar: Any) -> float:
    """Record a scalar (a 0-dim tensor or a number) for this step, where `spike:NAME` rules watch it.

    Returns it as a float. A CUDA tensor is read to the host here (one small copy per call). Without a
    running flight recorder it does nothing but return the value."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"dynstep.flight.watch(name, scalar): name must be a non-empty string, got {name!r}")
    recorder = current()
    if recorder is None:
        return float(scalar)
    return recorder.watch(name, scalar)


def dump(reason: str = "dynstep.flight.dump()") -> Path:
    """Write the flight recorder's rings now, as a recording under its path (a `manual` trigger)."""
    recorder = current()
    if recorder is None:
        raise DynstepError("dynstep.flight.dump(): no flight recorder is running; compile with "
                           "options={'flight': True} (or DYNSTEP_FLIGHT=DIR, dynstep run --flight DIR) first")
    return recorder.dump(reason)


def replay(dump: str | Path, *, out: str | Path | None = None) -> Any:
    """Re-run the graph call a dump kept: eagerly, compiled with every node probed (a recording at `out`,
    default DUMP.replay) and through the eager-vs-compiled diff; -> `dynstep.flight.rerun.ReplayResult`
    (`reproduced`, `verdict`, `diff`, the trigger node's statistics dumped, replayed and eager)."""
    from .rerun import replay as run

    return run(dump, out=out)
