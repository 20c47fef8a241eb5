"""The lead-up of a flight recorder's dump: what every module looked like over the steps before the trigger.

Per module (the innermost module a probed value was computed in), step by step over the dump's window:
the largest absmax of its values (a spike anywhere inside it shows), the mean and std of its last value
(usually what it returns), and the NaN/Inf count of all its values; the same for the gradients flowing
into them. The trigger's node gets its own curve. Modules are listed with the trigger's first, then in
graph order; at most `MAX_MODULES`.

    lead = leadup_of(recording.flight, hits)      # report.model.build does it for a dump
    lead.trigger.step, lead.modules[0].module, lead.modules[0].value.absmax
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from ..core.records import Snapshot
from ..recording.flight_facts import FlightInfo, Trigger, WatchSeries

MAX_MODULES = 40
TOP = "(top level)"


@dataclasses.dataclass(frozen=True)
class Curve:
    """One series over the window's steps (NaN where the step has no hit)."""

    steps: tuple[int, ...]
    absmax: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    nonfinite: tuple[int, ...]

    @property
    def first_bad(self) -> int | None:
        """The first step with a NaN/Inf, or None."""
        return next((s for s, n in zip(self.steps, self.nonfinite) if n), None)


@dataclasses.dataclass(frozen=True)
class ModuleLeadUp:
    key: str                  # anchor in the page: "m3"
    module: str
    values: int               # probed values in it
    value: Curve | None
    grad: Curve | None
    first: bool               # it holds the trigger's node


@dataclasses.dataclass(frozen=True)
class LeadUp:
    trigger: Trigger
    steps: tuple[int, ...]
    step_rule: str
    node: Curve | None        # the trigger's node, in its phase
    modules: tuple[ModuleLeadUp, ...]
    left_out: int
    watched: tuple[WatchSeries, ...]


def leadup_of(info: FlightInfo, hits: Sequence[Snapshot], max_modules: int = MAX_MODULES) -> LeadUp:
    steps = tuple(range(info.first_step, info.last_step + 1))
    trigger = info.trigger
    by_module: dict[str, list[Snapshot]] = {}
    for s in hits:
        if s.step >= 0:
            by_module.setdefault(s.module or TOP, []).append(s)
    node_hits = [s for s in hits if s.node == trigger.node and s.graph == trigger.graph and
                 s.kind == ("grad" if trigger.phase == "backward" else "value")]
    rows = [_module(m, snaps, steps, trigger) for m, snaps in by_module.items()]
    rows.sort(key=lambda r: (not r[0].first, r[1]))   # the trigger's module, then graph order
    shown = [dataclasses.replace(r, key=f"m{i}") for i, (r, _) in enumerate(rows[:max_modules])]
    return LeadUp(trigger, steps, info.step_rule, _curve(node_hits, steps, last_only=False) if node_hits else None,
                  tuple(shown), max(0, len(rows) - max_modules), info.watched)


def _module(module: str, snaps: list[Snapshot], steps: tuple[int, ...], trigger: Trigger) -> tuple[ModuleLeadUp, int]:
    values = [s for s in snaps if s.kind == "value"]
    grads = [s for s in snaps if s.kind == "grad"]
    first = bool(trigger.node) and any(s.node == trigger.node and s.graph == trigger.graph for s in snaps)
    row = ModuleLeadUp(key="", module=module, values=len({(s.graph, s.node) for s in values}),
                       value=_curve(values, steps) if values else None, grad=_curve(grads, steps) if grads else None,
                       first=first)
    return row, min(s.seq for s in snaps)


def _curve(snaps: list[Snapshot], steps: tuple[int, ...], *, last_only: bool = True) -> Curve:
    """absmax: the largest of the step's hits; mean/std: the step's last hit of the last value (graph order);
    nonfinite: summed over the step's hits."""
    last_node = max(snaps, key=lambda s: s.seq).node if last_only else None
    absmax: dict[int, float] = {}
    moments: dict[int, tuple[int, float, float]] = {}
    bad: dict[int, int] = {}
    for s in snaps:
        a = s.stats.absmax
        if math.isfinite(a):
            absmax[s.step] = max(a, absmax.get(s.step, -math.inf))
        bad[s.step] = bad.get(s.step, 0) + s.stats.nan + s.stats.inf
        if (last_node is None or s.node == last_node) and s.seq >= moments.get(s.step, (-1, 0.0, 0.0))[0]:
            moments[s.step] = (s.seq, s.stats.mean, s.stats.std)
    return Curve(steps, tuple(absmax.get(t, math.nan) for t in steps),
                 tuple(moments[t][1] if t in moments else math.nan for t in steps),
                 tuple(moments[t][2] if t in moments else math.nan for t in steps),
                 tuple(bad.get(t, 0) for t in steps))
