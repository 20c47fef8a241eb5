"""What a flight recorder's dump keeps besides its snapshots (flight.json): the trigger and the window.

    rec = dynstep.load("dynstep-flight/20261125-101500-rank0-nonfinite")
    rec.trigger.kind, rec.trigger.step, rec.trigger.node, rec.trigger.module, rec.trigger.source
    rec.flight.first_step, rec.flight.last_step, rec.flight.watched[0].values

Frozen dataclasses, converted with `recording.facts.to_json` / `from_json` (every field checked).
"""

from __future__ import annotations

import dataclasses
import math

from .facts import from_json, to_json

TRIGGER_KINDS = ("nonfinite", "spike", "exception", "signal", "manual")
FLIGHT_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Trigger:
    """Why a dump was written, and for a bad value where it was first seen (graph order, forward first)."""

    kind: str                 # "nonfinite", "spike", "exception", "signal", "manual"
    step: int                 # the step it happened in
    node: str = ""            # the first node whose value went non-finite or jumped ("" when none)
    module: str = ""          # its module path
    source: str = ""          # the user's line, "file:line"
    graph: str = ""           # "forward[0/0]"
    phase: str = ""           # "forward" (a value) or "backward" (the gradient flowing into it)
    target: str = ""          # the op the node calls
    source_text: str = ""
    site: int = -1
    call: int = -1
    seq: int = 0              # the hit's order in the process (its snapshot's seq)
    reason: str = ""          # one line saying what fired
    name: str = ""            # a spike: the watched scalar's name
    value: float = math.nan   # a spike: the scalar's value
    time: str = ""            # when it fired (ISO 8601)

    @property
    def where(self) -> str:
        """"node linear_7 (blocks.1.mlp, model.py:45)", or "" when the trigger names no node."""
        if not self.node:
            return ""
        inside = ", ".join(p for p in (self.module, self.source) if p)
        return f"node {self.node}" + (f" ({inside})" if inside else "")


@dataclasses.dataclass(frozen=True)
class WatchSeries:
    """A scalar given to `dynstep.flight.watch(name, x)`, step by step over the window."""

    name: str
    steps: tuple[int, ...]
    values: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class FlightInfo:
    """flight.json: the trigger, the steps the dump holds, and how a step was counted."""

    trigger: Trigger
    steps: int                          # K, the steps kept before the trigger's
    first_step: int                     # the window the snapshots cover (their `step`)
    last_step: int
    step_rule: str                      # "optimizer" (optimizer steps) or "call" (top-level compiled calls)
    starts: tuple[tuple[int, int], ...]  # (step, the first hit order `seq` of that step)
    watched: tuple[WatchSeries, ...] = ()
    sites: int = 0                      # probed values and gradients
    hits: int = 0                       # snapshots in the dump
    ring_bytes: int = 0                 # what the rings held when it was written
    replay: str = ""                    # "" when replay.json holds a graph call to replay, else why not
    format: int = FLIGHT_FORMAT
    inf_sites: tuple[int, ...] = ()     # sites holding Inf from their first call on (a mask): Inf by design


def flight_json(info: FlightInfo) -> dict:
    return to_json(info)


def flight_from_json(raw: object) -> FlightInfo:
    info = from_json(FlightInfo, raw)
    if info.trigger.kind not in TRIGGER_KINDS:
        raise ValueError(f"Trigger.kind must be one of {list(TRIGGER_KINDS)}, got {info.trigger.kind!r}")
    return info
