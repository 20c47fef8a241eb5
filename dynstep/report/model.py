"""The report of a recording: what `dynstep report` shows, as frozen dataclasses (no rendering).

    report = build(dynstep.load("run.dynstep", tensors=False), select=["module:blocks.*"])
    report.summary.calls, report.first_nonfinite, report.panels[0].value.absmax, report.events

A *panel* is one probed value over its calls (the steps of a training loop): the value's series
and the gradient flowing into it, side by side. A value probed in recompiled copies of a graph
(``forward[0/0]``, ``forward[0/1]``) is one panel: its points follow hit order.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Sequence
from typing import Any, Protocol

from ..core.records import Snapshot, Stats
from ..jobs.compare import RankDifference, compare_ranks
from ..graph import selectors as sel
from ..graph.filter import snapshot_matches
from .histogram import Histogram, histogram
from .leadup import LeadUp, leadup_of
from ..recording.facts import CompileEvent, GraphPlan, KernelCount, RunInfo, dedupe

STATS = ("min", "max", "mean", "std", "absmax")
MAX_PANELS = 48
_COMPILE_ID = re.compile(r"\[[^\]]*\]$")


class RecordingLike(Protocol):
    """What `build` reads (`dynstep.recording.reader.Recording` is one)."""

    path: Any
    problems: tuple[str, ...]
    run: RunInfo | None

    def all(self) -> list[Snapshot]: ...

    @property
    def compile_events(self) -> list[CompileEvent]: ...

    @property
    def plans(self) -> list[GraphPlan]: ...


@dataclasses.dataclass(frozen=True)
class Series:
    """One kind (value or grad) of a probed value, hit by hit."""

    kind: str
    calls: tuple[int, ...]
    seqs: tuple[int, ...]
    min: tuple[float, ...]
    max: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    absmax: tuple[float, ...]
    nan: tuple[int, ...]
    inf: tuple[int, ...]

    @property
    def first_bad(self) -> int | None:
        """Index of the first point with a NaN or Inf, or None."""
        return next((i for i, (n, f) in enumerate(zip(self.nan, self.inf)) if n or f), None)


@dataclasses.dataclass(frozen=True)
class Panel:
    key: str                  # anchor in the page: "p3"
    graph: str                # the graph's function ("forward"), compile ids left out
    node: str
    target: str
    module: str
    probe: str
    source: str
    source_text: str
    value: Series | None
    grad: Series | None
    value_histogram: Histogram | None = None   # the hit that matters most (report/histogram.py), when
    grad_histogram: Histogram | None = None    # the recording kept its tensor (a `record` probe)

    @property
    def bad(self) -> bool:
        return any(s is not None and s.first_bad is not None for s in (self.value, self.grad))


@dataclasses.dataclass(frozen=True)
class SourceLine:
    key: str                  # anchor in the page: "L3"
    source: str               # "model.py:45"
    path: str                 # full path when known
    text: str


@dataclasses.dataclass(frozen=True)
class Summary:
    snapshots: int
    values: int
    grads: int
    sites: int
    calls: int                # the most calls any probe saw (the steps of a training loop)
    probes: tuple[str, ...]
    graphs: tuple[str, ...]
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    compiles: int
    graph_breaks: int
    recompiles: int
    inner: tuple[str, ...]
    options: tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class RunReport:
    path: str
    run: RunInfo | None
    summary: Summary
    problems: tuple[str, ...]
    hits: tuple[Snapshot, ...]
    panels: tuple[Panel, ...]
    left_out: int             # panels not drawn (not selected, or over the cap)
    first_nonfinite: Snapshot | None
    first_nonfinite_panel: str
    events: tuple[CompileEvent, ...]    # graph breaks and recompiles, each once with its count
    compiles: tuple[CompileEvent, ...]
    plans: tuple[GraphPlan, ...]
    sources: tuple[SourceLine, ...]
    selected: tuple[str, ...]
    rank: int | None = None             # a distributed job's recording: the rank drawn
    ranks: tuple[int, ...] = ()         # ... and every rank it holds
    rank_differences: tuple[RankDifference, ...] = ()   # hits where some rank differs from rank 0
    leadup: LeadUp | None = None        # a flight recorder's dump: the steps before its trigger
    kernels: tuple[KernelCount, ...] = ()   # per probed graph: Inductor's kernels with (and without) the probes

    def source_key(self, source: str, path: str = "") -> str:
        """The anchor of a user line ("" when the report does not list it)."""
        return self._source_index.get(_line_id(source, path), "")

    @functools.cached_property
    def _source_index(self) -> dict[str, str]:
        index: dict[str, str] = {}
        for line in self.sources:
            index.setdefault(_line_id(line.source, line.path), line.key)
            index.setdefault(line.source, line.key)
        return index


def build(recording: RecordingLike, *, select: Sequence[str] = (), max_panels: int = MAX_PANELS,
          rank: int | None = None) -> RunReport:
    """The report of a recording; `select` (selectors) picks the panels drawn (None: all, up to the cap).
    A distributed job's recording is drawn for one rank (`rank`, default 0), compared across all."""
    selectors = [sel.parse(s) for s in select]
    every = recording.all()
    ranks = tuple(sorted({s.rank for s in every}))
    if len(ranks) > 1 or rank is not None:
        rank = ranks[0] if rank is None else rank
        differences = tuple(d for d in compare_ranks(every)
                            if not selectors or any(sel_matches(d, x) for x in selectors))
        every = [s for s in every if s.rank == rank]
    else:
        rank, differences = None, ()
    hits = tuple(sorted((dataclasses.replace(s, tensor=None) if s.tensor is not None else s
                         for s in every), key=lambda s: s.seq))
    bad = _first_bad(recording, hits)
    panels = panels_of(hits)
    chosen = [p for p, snaps in panels if not selectors or any(snapshot_matches(s, x) for s in snaps
                                                               for x in selectors)]
    first_panel = next((p.key for p, snaps in panels if bad is not None and bad in snaps), "")
    shown = chosen[:max_panels]
    if first_panel and all(p.key != first_panel for p in shown):
        shown = [p for p, _ in panels if p.key == first_panel] + shown[:max_panels - 1]
    snaps_of, tensor_of = {p.key: snaps for p, snaps in panels}, _tensors(recording, every)
    shown = [_with_histograms(p, snaps_of[p.key], tensor_of) for p in shown]
    events = list(recording.compile_events)
    plans = tuple(recording.plans)
    return RunReport(path=str(recording.path), run=recording.run, summary=_summary(hits, events, plans),
                     problems=tuple(recording.problems), hits=hits, panels=tuple(shown),
                     left_out=len(panels) - len(shown), first_nonfinite=bad, first_nonfinite_panel=first_panel,
                     events=dedupe([e for e in events if e.kind != "compile"]),
                     compiles=tuple(e for e in events if e.kind == "compile"), plans=plans,
                     sources=_sources(hits, events, plans), selected=tuple(select), rank=rank,
                     ranks=ranks if rank is not None else (), rank_differences=differences,
                     leadup=_leadup(recording, hits), kernels=tuple(getattr(recording, "kernel_counts", ())))


def _first_bad(recording: RecordingLike, hits: tuple[Snapshot, ...]) -> Snapshot | None:
    """The first hit with a NaN/Inf; in a flight dump, the Inf of a value holding Inf from its first call on
    (an attention mask) is by design and does not count, and a non-finite trigger names its own hit."""
    info = getattr(recording, "flight", None)
    by_design = set(info.inf_sites) if info is not None else set()
    bad = next((s for s in hits if s.stats.nan or (s.stats.inf and s.site not in by_design)), None)
    if info is not None and info.trigger.kind == "nonfinite":
        bad = next((s for s in hits if s.seq == info.trigger.seq and s.site == info.trigger.site), bad)
    return bad


def _leadup(recording: RecordingLike, hits: tuple[Snapshot, ...]) -> LeadUp | None:
    info = getattr(recording, "flight", None)   # a flight recorder's dump (dynstep.flight)
    return leadup_of(info, hits) if info is not None else None


def sel_matches(difference: RankDifference, selector: sel.Selector) -> bool:
    """Does a rank difference concern a value `selector` names (its node, module or line)?"""
    fake = Snapshot(kind=difference.kind, probe="", node=difference.node, target="", module=difference.module,
                    source=difference.source, graph=difference.graph, call=difference.call, shape=(), dtype="",
                    device="", stats=Stats())
    return snapshot_matches(fake, selector) or selector.kind == "module" and \
        bool(sel.module_glob_regex(selector.pattern).match(difference.module))


def panels_of(hits: tuple[Snapshot, ...]) -> list[tuple[Panel, list[Snapshot]]]:
    groups: dict[tuple, list[Snapshot]] = {}
    for s in hits:
        groups.setdefault((_COMPILE_ID.sub("", s.graph), s.node, s.target, s.source), []).append(s)
    out = []
    for i, ((graph, node, target, source), snaps) in enumerate(groups.items()):
        first = snaps[0]
        series = {kind: _series(kind, [s for s in snaps if s.kind == kind]) for kind in ("value", "grad")}
        out.append((Panel(key=f"p{i}", graph=graph, node=node, target=target, module=first.module,
                          probe=first.probe, source=source, source_text=first.source_text,
                          value=series["value"], grad=series["grad"]), snaps))
    return out


def _tensors(recording: RecordingLike, every: list[Snapshot]) -> Any:
    """A hit's recorded tensor: kept by the load, or read now (`tensor_of`, a `tensors=False` load)."""
    kept = {s.hit: s.tensor for s in every if s.tensor is not None}
    lazy = getattr(recording, "tensor_of", None)

    def tensor_of(s: Snapshot) -> Any:
        found = kept.get(s.hit)
        return found if found is not None or lazy is None else lazy(s)
    return tensor_of


def _with_histograms(panel: Panel, snaps: list[Snapshot], tensor_of: Any) -> Panel:
    """The panel with the distribution of its most telling hit per kind: the first with a NaN/Inf,
    else the last one that kept its tensor."""
    found = {}
    for kind in ("value", "grad"):
        kept = [s for s in snaps if s.kind == kind and s.shape and 0 not in s.shape]
        bad = [s for s in kept if s.stats.nan or s.stats.inf]
        for s in bad[:1] + kept[::-1]:
            tensor = tensor_of(s)
            if tensor is not None:
                found[kind] = histogram(tensor, kind=kind, call=s.call, seq=s.seq)
                break
    if not found:
        return panel
    return dataclasses.replace(panel, value_histogram=found.get("value"), grad_histogram=found.get("grad"))


def _series(kind: str, snaps: list[Snapshot]) -> Series | None:
    if not snaps:
        return None
    return Series(kind=kind, calls=tuple(s.call for s in snaps), seqs=tuple(s.seq for s in snaps),
                  **{k: tuple(float(s.stats[k]) for s in snaps) for k in STATS},
                  nan=tuple(s.stats.nan for s in snaps), inf=tuple(s.stats.inf for s in snaps))


def _summary(hits: tuple[Snapshot, ...], events: list[CompileEvent], plans: tuple[GraphPlan, ...]) -> Summary:
    calls: dict[int, int] = {}
    for s in hits:
        calls[s.site] = max(calls.get(s.site, 0), s.call + 1)
    options: dict[str, str] = {}
    for p in plans:
        for name, value in p.options:
            options.setdefault(name, value)
    graphs = dict.fromkeys([s.graph for s in hits] + [p.graph for p in plans])
    return Summary(snapshots=len(hits), values=sum(s.kind == "value" for s in hits),
                   grads=sum(s.kind == "grad" for s in hits), sites=len({(s.graph, s.site) for s in hits}),
                   calls=max(calls.values(), default=0), probes=_unique(p for s in hits for p in s.probe.split(" | ")),
                   graphs=tuple(graphs), devices=_unique(s.device for s in hits), dtypes=_unique(s.dtype for s in hits),
                   compiles=sum(e.kind == "compile" for e in events),
                   graph_breaks=sum(e.kind == "graph_break" for e in events),
                   recompiles=sum(e.kind == "recompile" for e in events),
                   inner=_unique(p.inner for p in plans), options=tuple(options.items()))


def _unique(items: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i))


def _line_id(source: str, path: str) -> str:
    if path and ":" in source:
        return f"{path}:{source.rpartition(':')[2]}"
    return source


def _sources(hits: Sequence[Snapshot], events: list[CompileEvent], plans: tuple[GraphPlan, ...]) -> tuple[SourceLine, ...]:
    """Every user line the report names, once: full paths where known, else "file:line"."""
    found: dict[str, SourceLine] = {}
    short: dict[str, str] = {}   # "model.py:45" -> the id of the line with its full path

    def add(source: str, path: str, text: str) -> None:
        if not source:
            return
        ident = _line_id(source, path)
        if ident not in found:
            found[ident] = SourceLine(key=f"L{len(found)}", source=source, path=path, text=text)
        if path:
            short.setdefault(source, ident)

    for e in events:
        if e.file and e.line:
            add(e.where, e.file, e.source_text)
    for plan in plans:
        for row in plan.rows:
            add(row.source, row.path, row.source_text)
    for s in hits:
        if s.source not in short:
            add(s.source, "", s.source_text)
    return tuple(found.values())


def finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if not math.isnan(v) and not math.isinf(v)]
