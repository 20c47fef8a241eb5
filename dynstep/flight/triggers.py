"""Trigger rules of the flight recorder and the node a trigger names.

- nonfinite: the first hit (in hit order: graph order, a graph's values before the gradients flowing into
  them) whose statistics count a NaN or Inf;
- spike: a watched scalar is non-finite, or above FACTOR x the median of its earlier values (at least
  `WARMUP` of them, within the last K steps); the dump then names the first node (hit order) of that
  step whose absmax jumped the same way against its own earlier steps;
- exception, signal, manual: the dump names the first non-finite hit of its window, if there is one.

    spiked([3.1, 3.0, 2.9, 2.9], 9.5, factor=2.0)    -> True
    nonfinite_trigger(site, snapshot, step)           -> Trigger(kind="nonfinite", ...)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Iterable, Sequence

from ..core.records import Snapshot
from ..core.sites import Site
from ..recording.flight_facts import Trigger
from ..recording.facts import timestamp
from .ring import Hit

WARMUP = 4


def spiked(previous: Sequence[float], value: float, factor: float) -> bool:
    if not math.isfinite(value):
        return True
    earlier = [abs(v) for v in previous if math.isfinite(v)]
    if len(earlier) < WARMUP:
        return False
    return abs(value) > factor * statistics.median(earlier)


def phase(site: Site) -> str:
    return "forward" if site.kind == "value" else "backward"


def at_hit(kind: str, site: Site, hit: Hit | Snapshot, step: int, reason: str, **extra) -> Trigger:
    """A trigger naming the node of one hit."""
    return Trigger(kind=kind, step=step, node=site.node, module=site.module, source=site.source, graph=site.graph,
                   phase=phase(site), target=site.target, source_text=site.source_text, site=site.id, call=hit.call,
                   seq=hit.seq, reason=reason, time=timestamp(), **extra)


def nonfinite_trigger(site: Site, snap: Snapshot, step: int) -> Trigger:
    what = "gradient flowing into" if site.kind == "grad" else "value of"
    counts = ", ".join(p for p in (f"{snap.stats.nan} NaN" if snap.stats.nan else "",
                                   f"{snap.stats.inf} Inf" if snap.stats.inf else "") if p)
    return at_hit("nonfinite", site, snap, step, f"{counts} in the {what} {site.node} ({site.target})")


def plain(kind: str, step: int, reason: str, **extra) -> Trigger:
    return Trigger(kind=kind, step=step, reason=reason, time=timestamp(), **extra)


def first_nonfinite(trigger: Trigger, hits: Iterable[tuple[Site, Hit, int]],
                    by_design: Collection[int] = ()) -> Trigger:
    """`trigger` naming the first non-finite hit among (site, hit, step) (hit order), if any; an Inf of a
    site in `by_design` (Inf from its first call on: a mask) does not count."""
    bad = [(h.seq, site, h, step) for site, h, step in hits
           if h.nan or (h.inf and site.id not in by_design)]
    if not bad:
        return trigger
    _, site, hit, step = min(bad, key=lambda b: b[0])
    named = at_hit(trigger.kind, site, hit, step, trigger.reason)
    return dataclasses.replace(named, step=trigger.step, name=trigger.name, value=trigger.value, time=trigger.time,
                               reason=f"{trigger.reason}; first NaN/Inf: {site.node} at step {step}")


def first_jump(trigger: Trigger, hits: Iterable[tuple[Site, Hit, int]], factor: float) -> Trigger:
    """A spike's trigger naming the first node (hit order) of its step whose absmax jumped."""
    history: dict[int, list[float]] = {}
    at_step: list[tuple[int, Site, Hit]] = []
    for site, h, step in hits:
        if step == trigger.step:
            at_step.append((h.seq, site, h))
        elif step < trigger.step:
            history.setdefault(site.id, []).append(h.absmax)
    for _, site, h in sorted(at_step, key=lambda t: t[0]):
        if spiked(history.get(site.id, ()), h.absmax, factor):
            named = at_hit("spike", site, h, trigger.step, trigger.reason, name=trigger.name, value=trigger.value)
            reason = f"{trigger.reason}; first jump: {site.node} ({site.module or '-'})"
            return dataclasses.replace(named, reason=reason)
    return trigger
