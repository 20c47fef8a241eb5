"""The flight recorder: statistics of every probed value over the last K steps, dumped when a trigger fires.

One per process, started by superstep's first compile with ``options={"flight": ...}`` (or
`DYNSTEP_FLIGHT`, `dynstep run --flight`); later compiles add their graphs to it.

The seam with the probes is `hit(ring, snapshot)`: every hit of a flight site reaches it through the
site's sink (`probe.runtime.set_sink`), from wherever the statistics were published — the native
kernel's ring when it is drained, the Python kernel, or a non-finite hit at once (the `nan` action of an
owned site hands the hit over instead of raising). It sees only a `Snapshot` (site, call, seq, Stats),
so statistics fused into Inductor's kernels and published to the same rings arrive unchanged.

    rec = start(FlightOptions(steps=16))
    rec.watch("loss", loss)          # dynstep.flight.watch
    rec.dump()                       # dynstep.flight.dump -> the dump's path
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..core.flight_options import FlightOptions
from ..core.records import Snapshot, Stats
from ..core.sites import Site
from ..probe import rings, runtime
from ..recording.compile_log import COMPILE_LOG
from ..recording.flight_facts import Trigger
from ..recording.facts import RunInfo
from . import triggers
from .clock import StepClock
from .hooks import Hooks
from .inputs import InputKeeper
from .ring import NATIVE_SLOT_BYTES, PYTHON_HIT_BYTES, SiteRing
from .source import FlightGraph


class _Sink:
    """The sink of one flight site (probe.runtime.RecordSink)."""

    __slots__ = ("recorder", "ring")

    def __init__(self, recorder: "FlightRecorder", ring: SiteRing) -> None:
        self.recorder, self.ring = recorder, ring

    def add(self, snap: Snapshot) -> None:
        self.recorder.hit(self.ring, snap)

    def add_raw(self, seq: int, call: int, numbers: tuple, shape: Sequence[int], dtype: str, device: str) -> None:
        """A hit drained from the native ring (probe.runtime.RawAdd): no Snapshot unless it is non-finite."""
        self.ring.add_raw(seq, call, numbers, shape, dtype, device)
        if numbers[5] or numbers[6]:
            snap = runtime.snapshot_for(self.ring.site, call, tuple(shape), dtype, device, Stats(*numbers), None, seq)
            self.recorder.nonfinite_hit(self.ring.site, snap)

    def count_dropped(self, ring: int, memory: int) -> None:
        pass   # a flight ring drops its oldest hits on purpose


class FlightRecorder:
    def __init__(self, opts: FlightOptions) -> None:
        self.opts = opts
        self.clock = StepClock(keep=opts.steps + 3)
        self.rings: dict[int, SiteRing] = {}
        self.graphs: dict[str, FlightGraph] = {}
        self.watched: dict[str, collections.deque[tuple[int, float]]] = {}
        self.pending: Trigger | None = None
        self.fired: set[str] = set()
        self.dumps: list[Path] = []
        self.keeper = InputKeeper(opts.inputs)
        self.lock = threading.RLock()
        self._since_drain = 0
        self._writing = False
        self._inf_base: dict[int, float] = {}   # site -> share of Inf on its first call (Inf by design)
        self._seen_device: set[str] = set()     # graphs whose first call's inputs were looked at
        self.cuda = False                       # a graph ran on a CUDA device: its hits are published there
        self._nonfinite_harvested = 0           # rings.harvest_device()'s count when last looked at
        self.run = RunInfo.now(session="flight recorder")
        self.log_mark = COMPILE_LOG.mark()      # a dump keeps the compile log from here on
        self.hooks = Hooks.install(self, signals=opts.signals, exceptions=opts.exceptions)

    # -- graphs and the publish seam ----------------------------------------------------------
    def add_graph(self, graph: FlightGraph, sites: Sequence[Site]) -> None:
        with self.lock:
            self.graphs[graph.graph] = graph
            for site in sites:
                ring = self.rings[site.id] = SiteRing(site, self.opts.steps + 1)
                sink = _Sink(self, ring)
                runtime.set_sink(site.id, sink, sink.add_raw)

    def hit(self, ring: SiteRing, snap: Snapshot) -> None:
        """A hit of a flight site: into its ring; a non-finite one may be the trigger."""
        ring.add(snap)
        if snap.stats.nan or snap.stats.inf:
            self.nonfinite_hit(ring.site, snap)

    def nonfinite_hit(self, site: Site, snap: Snapshot) -> None:
        """A hit holding NaN/Inf (already in its ring): it may be the trigger."""
        if self._writing:
            return
        rule = self.opts.nonfinite
        if rule is None or (rule == "value" and site.kind != "value") or "nonfinite" in self.fired:
            return
        if not snap.stats.nan and self._inf_by_design(site, snap):
            return
        with self.lock:
            step = self.clock.step_of(snap.seq)
            pending = self.pending   # hits may arrive out of order (drained rings): the earliest one wins
            if pending is None or (pending.kind == "nonfinite" and (step, snap.seq) < (pending.step, pending.seq)):
                self.pending = triggers.nonfinite_trigger(site, snap, step)

    def _inf_by_design(self, site: Site, snap: Snapshot) -> bool:
        """A value holding Inf from its first call on (an attention mask filled with -inf) makes them on
        purpose: only a larger share of Inf than on that first call counts."""
        st = snap.stats
        share = st.inf / max(1, st.count + st.nan + st.inf)
        base = self._inf_base.get(site.id)
        if base is None and snap.call == 0:
            self._inf_base[site.id] = share
            return True
        return base is not None and share <= base

    def last_step(self) -> int:
        """The step that ran last: this one once a compiled call ran in it, else the one before (a scalar
        watched, or an exception raised, after `optimizer.step()` belongs to the step that just ended)."""
        return self.clock.step if self.clock.calls or self.clock.step == 0 else self.clock.step - 1

    def inf_sites(self) -> set[int]:
        """Sites whose Inf is by design (held from their first call on)."""
        return set(self._inf_base)

    # -- steps ----------------------------------------------------------------------------------
    def before_call(self, graph: str, args: Sequence[Any]) -> None:
        with self.lock:
            if graph not in self._seen_device:
                self._seen_device.add(graph)
                self.cuda = self.cuda or any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
            if self.cuda and self.clock.starts_step(graph):   # settle_device does nothing without CUDA
                self.settle_device()
            if self.clock.call(graph):
                self._boundary()
            self.keeper.keep(graph, self.clock.step, args, rng=self.graphs[graph].rng)
            self._drain_if_crowded(graph)

    def after_call(self, graph: str) -> None:
        self.keeper.after_call(graph)

    def optimizer_pre(self) -> None:
        with self.lock:
            self.settle_device()
            if self.pending is not None:   # parameters are about to change: keep what the trigger's graph saw
                self.keeper.freeze(self._replay_order())

    def optimizer_post(self) -> None:
        with self.lock:
            ended = self.clock.optimizer_step()
            if self.clock.renumbered:   # the calls so far were one step: step 0
                self.clock.renumbered = False
                self._renumber()
            if ended:
                self._boundary()

    def _renumber(self) -> None:
        for name, history in self.watched.items():
            if history:
                self.watched[name] = collections.deque([(0, history[-1][1])], maxlen=history.maxlen)
        if self.pending is not None:
            self.pending = dataclasses.replace(self.pending, step=0)

    def settle_device(self) -> None:
        """At the end of a step on a CUDA device: the step's statistics were published into mapped host
        memory by the device (inside the captured graphs under reduce-overhead, no host callback, no
        copy); wait for the step's kernels to finish, then move its hits into the native rings now, so
        their order numbers fall in the step that made them. Only a step that saw a NaN/Inf hands its
        hits on to Python (where the first one becomes the trigger); otherwise nothing leaves C++."""
        if not self.cuda:
            return
        torch.cuda.synchronize()
        _, nonfinite = rings.harvest_device()
        if nonfinite != self._nonfinite_harvested:
            self._nonfinite_harvested = nonfinite
            rings.drain_native()

    def _boundary(self) -> None:
        """A step ended: a pending trigger is dumped now, with its whole step."""
        if self.pending is not None:
            self._write(self.pending)

    def _drain_if_crowded(self, graph: str) -> None:
        """A graph called m > 1 times per step fills its native rings (K + 1 slots) in (K + 1) / m steps:
        before that, move every native ring into the Python rings, grown to hold K + 1 steps."""
        if self.clock.calls_per_step(graph) <= 1:
            return
        self._since_drain += 1
        if self._since_drain < self.opts.steps:
            return
        self._since_drain = 0
        self.grow_rings()
        rings.drain_native()

    def grow_rings(self) -> None:
        """The Python rings of graphs called m > 1 times per step hold (K + 1) x m hits."""
        for graph, fg in self.graphs.items():
            per_step = self.clock.calls_per_step(graph)
            if per_step > 1:
                for site_id in fg.sites:
                    self.rings[site_id].grow((self.opts.steps + 1) * per_step)

    # -- triggers --------------------------------------------------------------------------------
    def watch(self, name: str, value: Any) -> float:
        number = float(value.detach().float().item()) if isinstance(value, torch.Tensor) else float(value)
        with self.lock:
            step = self.last_step()
            history = self.watched.setdefault(name, collections.deque(maxlen=self.opts.steps + 1))
            if history and history[-1][0] == step:
                history.pop()                  # watched twice in one step: the last value counts
            earlier = [v for s, v in history]
            history.append((step, number))
            for rule in self.opts.spikes:
                key = f"spike:{name}"
                if rule.name == name and key not in self.fired and self.pending is None and \
                        triggers.spiked(earlier, number, rule.factor):
                    self.pending = triggers.plain("spike", step, _spike_reason(name, number, earlier, rule.factor),
                                                  name=name, value=number)
        return number

    def dump(self, reason: str = "dynstep.flight.dump()") -> Path:
        """Write the rings now (a `manual` trigger at the current step)."""
        with self.lock:
            path = self._write(triggers.plain("manual", self.last_step(), reason), quiet=False)
            assert path is not None
            return path

    def on_exception(self, exc: BaseException) -> None:
        self._fire_now("exception", self.opts.exceptions, f"{type(exc).__name__}: {exc}"[:300])

    def on_signal(self, signum: int) -> None:
        import signal

        self._fire_now("signal", self.opts.signals, f"{signal.Signals(signum).name} received")

    def at_exit(self) -> None:
        with self.lock:
            if self.pending is not None:
                self._write(self.pending)

    def _fire_now(self, kind: str, wanted: bool, reason: str) -> None:
        with self.lock:
            if self.pending is not None:          # what was pending explains more: dump it first
                self._write(self.pending)
            if wanted and kind not in self.fired:
                self._write(triggers.plain(kind, self.last_step(), reason))

    def _write(self, trigger: Trigger, *, quiet: bool = True) -> Path | None:
        """Write a dump; a trigger's dump that fails warns (the model goes on), a manual one raises."""
        from .writer import write

        key = f"spike:{trigger.name}" if trigger.kind == "spike" else trigger.kind
        if self.cuda and torch.cuda.is_initialized():
            torch.cuda.synchronize()              # every hit of the step so far published before the drain
        if trigger is self.pending:
            self.pending = None
        self._writing = True
        try:
            path = write(self, trigger)
        except Exception as exc:
            if not quiet:
                raise
            warnings.warn(f"dynstep: the flight recorder could not write its dump ({exc!r})", RuntimeWarning,
                          stacklevel=3)
            return None
        finally:
            self._writing = False
        if trigger.kind != "manual":
            self.fired.add(key)
        self.dumps.append(path)
        return path

    def _replay_order(self) -> list[str]:
        """Graphs whose inputs a dump keeps first: the pending trigger's graph, then the rest by first call."""
        first = self.pending.graph if self.pending is not None and self.pending.graph else ""
        return ([first] if first in self.graphs else []) + [g for g in self.graphs if g != first]

    # -- sizes ------------------------------------------------------------------------------------
    def memory(self) -> tuple[int, int]:
        """(bytes the rings may hold at most, bytes per probed value per step): native slots, and the
        Python side once drained."""
        slots = sum(r.slots for r in self.rings.values())
        return slots * (NATIVE_SLOT_BYTES + PYTHON_HIT_BYTES), NATIVE_SLOT_BYTES + PYTHON_HIT_BYTES

    def close(self) -> None:
        """Remove the hooks and stop every flight site (compiled graphs keep calling them: no-ops)."""
        self.hooks.remove()
        for site_id in list(self.rings):
            rings.close_site(site_id)


def _spike_reason(name: str, value: float, earlier: list[float], factor: float) -> str:
    import statistics

    finite = [abs(v) for v in earlier if v == v and abs(v) != float("inf")]
    if value != value or abs(value) == float("inf"):
        return f"{name} = {value} (not finite)"
    return (f"{name} = {value:.6g} > {factor:g} x the median |{name}| {statistics.median(finite):.6g} of the last "
            f"{len(finite)} steps")


_recorder: FlightRecorder | None = None
_start_lock = threading.Lock()


def start(opts: FlightOptions) -> FlightRecorder:
    """The process's flight recorder, started with `opts` the first time (later options must agree)."""
    global _recorder
    with _start_lock:
        if _recorder is None:
            _recorder = FlightRecorder(opts)
        elif dataclasses.replace(_recorder.opts, select=opts.select) != opts:
            warnings.warn(f"dynstep: the flight recorder runs with {_recorder.opts}; a later compile asked for "
                          f"{opts} (only 'select' may differ per compile); keeping the first", UserWarning,
                          stacklevel=3)
        return _recorder


def current() -> FlightRecorder | None:
    return _recorder


def stop() -> None:
    """Stop the process's flight recorder (its hooks removed, its sites no-ops); the next flight compile
    starts a new one."""
    global _recorder
    with _start_lock:
        if _recorder is not None:
            _recorder.close()
            _recorder = None
