"""Writing a flight recorder's dump: an ordinary recording (`dynstep.load` reads it, `dynstep report`
draws it), crash-safe as recordings are (built in a sibling folder, renamed into place), holding:

- records.jsonl: every probed value's and gradient's statistics over the window (the trigger's step and
  the K steps before it), each snapshot with its `step`; encoded here from the rings' compact hits, one
  JSON prefix per site, so K = 64 steps of a few thousand values write in well under a second;
- flight.json: the trigger (kind, step, node, module, source, graph, phase) and the window
  (`dynstep.recording.flight_facts.FlightInfo`);
- replay.json + replay.safetensors, when the trigger's graph call could be kept: the graph as JSON and
  its inputs (`dynstep flight replay DUMP`); otherwise flight.json's `replay` says why not.

The dump's folder is DIR/<date>-<time>-rank<R>-<kind> (with -2, -3 ... if taken).

    path = write(recorder, trigger)
"""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.jsonsafe import json_float, json_safe
from ..jobs.identity import rank_world
from ..probe import rings
from ..recording.facts import RunInfo
from ..recording.flight_facts import FlightInfo, Trigger, WatchSeries, flight_json
from ..recording.storage import save_prepared
from ..recording.compile_log import COMPILE_LOG
from . import triggers
from .replayfile import replay_files

if TYPE_CHECKING:
    from ..core.sites import Site
    from .source import DumpSource
    from .ring import Hit

STATS = ("min", "max", "mean", "std", "absmax")


def write(recorder: "DumpSource", trigger: Trigger) -> Path:
    # The drain and the encoding make tens of thousands of small objects and no cycles; on a training
    # process's heap (torch, transformers, Inductor's modules: millions of objects) each full collection
    # they would set off costs a few hundred ms (measured: 1.4 of a 3.4 s dump), so none runs meanwhile.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _write(recorder, trigger)
    finally:
        if enabled:
            gc.enable()


def _write(recorder: "DumpSource", trigger: Trigger) -> Path:
    recorder.grow_rings()
    rings.drain_native()          # every hit the native rings hold, into the flight rings
    first = trigger.step - recorder.opts.steps
    hits = _window(recorder, first, trigger.step)
    trigger = _named(recorder, trigger, hits)
    files, why_not = replay_files(recorder, trigger)
    held, _ = recorder.memory()
    info = FlightInfo(trigger=trigger, steps=recorder.opts.steps, first_step=max(first, 0), last_step=trigger.step,
                      step_rule=recorder.clock.rule, starts=recorder.clock.starts(), watched=_watched(recorder, first),
                      sites=len(recorder.rings), hits=len(hits), ring_bytes=held, replay=why_not,
                      inf_sites=tuple(sorted(recorder.inf_sites())))
    files["flight.json"] = json.dumps(json_safe(flight_json(info)), indent=1).encode()
    graphs = {site.graph for site, _, _ in hits} | set(recorder.graphs)
    path = _unique(Path(recorder.opts.path), trigger)
    return save_prepared(path, _lines(hits), run=recorder.run.closed(), compile=COMPILE_LOG.for_recording(
        recorder.log_mark, graphs), files=files)


def _window(recorder: "DumpSource", first: int, last: int) -> list[tuple["Site", "Hit", int]]:
    step_of = recorder.clock.step_of
    out = []
    for ring in recorder.rings.values():
        for hit in ring.hits:
            step = step_of(hit.seq)
            if first <= step <= last:
                out.append((ring.site, hit, step))
    out.sort(key=lambda t: t[1].seq)
    return out


def _named(recorder: "DumpSource", trigger: Trigger, hits: list) -> Trigger:
    """The node a trigger names: its own (non-finite), the first jump (spike), the first NaN (others)."""
    if trigger.node:
        return trigger
    if trigger.kind == "spike":
        factor = next((r.factor for r in recorder.opts.spikes if r.name == trigger.name), 2.0)
        return triggers.first_jump(trigger, hits, factor)
    return triggers.first_nonfinite(trigger, hits, recorder.inf_sites())


def _watched(recorder: "DumpSource", first: int) -> tuple[WatchSeries, ...]:
    out = []
    for name, history in recorder.watched.items():
        kept = [(s, v) for s, v in history if s >= first]
        out.append(WatchSeries(name, tuple(s for s, _ in kept), tuple(v for _, v in kept)))
    return tuple(out)


def _lines(hits: list[tuple["Site", "Hit", int]]) -> list[str]:
    """records.jsonl's lines: encoded natively (csrc/flight_lines.cpp) when the native kernel is loaded,
    else here; both take the same columns and write the same bytes."""
    columns = _columns(hits)
    text = rings.flight_lines(*columns)
    return [text] if text is not None else _python_lines(*columns)


def _columns(hits: list[tuple["Site", "Hit", int]]) -> tuple[list[str], list[int], list[int], list[float]]:
    """The hits as the encoders take them: one JSON prefix per (site, shape, dtype, device), each hit's
    prefix index, 6 ints per hit (call, seq, step, nan, inf, count) and 5 floats (min, max, mean, std,
    absmax)."""
    rank, world = rank_world()
    index: dict[tuple, int] = {}
    prefixes: list[str] = []
    which: list[int] = []
    ints: list[int] = []
    floats: list[float] = []
    for site, hit, step in hits:
        key = (site.id, hit.shape, hit.dtype, hit.device)
        i = index.get(key)
        if i is None:
            i = index[key] = len(prefixes)
            prefixes.append(_prefix(site, hit, rank, world))
        which.append(i)
        n = hit.numbers
        ints += (hit.call, hit.seq, step, n[5], n[6], n[7])
        floats += n[:5]
    return prefixes, which, ints, floats


def _python_lines(prefixes: list[str], which: list[int], ints: list[int], floats: list[float]) -> list[str]:
    lines = []
    for i, p in enumerate(which):
        call, seq, step, nan, inf, count = ints[6 * i:6 * i + 6]
        values = floats[5 * i:5 * i + 5]
        lo, hi, mean, std, absmax = values
        if lo - lo == hi - hi == mean - mean == std - std == absmax - absmax == 0.0:   # all finite: the fast way
            numbers = f'"min": {lo!r}, "max": {hi!r}, "mean": {mean!r}, "std": {std!r}, "absmax": {absmax!r}'
        else:
            numbers = ", ".join(f'"{k}": {_num(v)}' for k, v in zip(STATS, values))
        lines.append(f'{prefixes[p]}, "call": {call}, "seq": {seq}, "step": {step}, "stats": {{{numbers}, '
                     f'"nan": {nan}, "inf": {inf}, "count": {count}}}}}\n')
    return lines


def _prefix(site: "Site", hit: "Hit", rank: int, world: int) -> str:
    const: dict[str, Any] = {"kind": site.kind, "probe": site.probe, "node": site.node, "target": site.target,
                             "module": site.module, "source": site.source, "graph": site.graph,
                             "shape": list(hit.shape), "dtype": hit.dtype, "device": hit.device, "tensor": None,
                             "site": site.id, "source_text": site.source_text, "rank": rank, "world_size": world}
    return json.dumps(const)[:-1]


def _num(v: float) -> str:
    return json.dumps(json_float(float(v)))


def _unique(folder: Path, trigger: Trigger) -> Path:
    rank, _ = rank_world()
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-rank{rank}-{trigger.kind}"
    path, n = folder / base, 1
    while path.exists():
        n += 1
        path = folder / f"{base}-{n}"
    return path
