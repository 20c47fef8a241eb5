"""What a dump is written from: a graph the recorder probes (`FlightGraph`) and the recorder as the
writer and the replay files see it (`DumpSource`), so neither imports the recorder that calls them."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Protocol

import torch

from ..core.flight_options import FlightOptions
from ..recording.facts import RunInfo
from .clock import StepClock
from .inputs import InputKeeper
from .ring import SiteRing


@dataclasses.dataclass
class FlightGraph:
    """A graph the flight recorder probes, and what a replay of one of its calls needs."""

    graph: str
    sites: tuple[int, ...]
    replay: dict[str, Any] | None        # the graph as JSON (flight.graphio), None when it cannot travel
    why_not: str                         # ... and why
    attrs: dict[str, torch.Tensor]
    rng: bool                            # it calls random ops
    inner: str
    mode: str | None


class DumpSource(Protocol):
    """The flight recorder (flight.recorder.FlightRecorder), as a dump reads it."""

    opts: FlightOptions
    clock: StepClock
    rings: dict[int, SiteRing]
    graphs: dict[str, FlightGraph]
    watched: dict[str, collections.deque[tuple[int, float]]]
    keeper: InputKeeper
    run: RunInfo
    log_mark: Any

    def grow_rings(self) -> None: ...
    def memory(self) -> tuple[int, int]: ...
    def inf_sites(self) -> set[int]: ...
