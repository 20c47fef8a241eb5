"""Sessions collect what probes produce.

    with dynstep.session() as s:
        cm(x)
    s.records("module:blocks.0.mlp")      # [Snapshot, ...] in hit order
    s.save("run.dynstep")

Scoping, defined and tested:
- A session receives the hits of code that runs in its context (a `contextvars` scope: the
  thread that opened it and tasks/threads that copy its context).
- Nested sessions both receive a hit while the inner one is open.
- Concurrent sessions in different threads each receive only their own thread's hits.
- A hit in a thread with no session in its context (autograd's device threads, workers) goes to
  every open session created with ``all_threads=True``; if there is none, to the most recently
  opened session that is still open; if no session is open, to the process default session
  (`dynstep.default_session()`), so nothing a probe recorded is lost.
- Each probe keeps a ring per session: ``record`` entries for probes with the record action
  (tensor copies), ``summaries`` entries for stats-only hits. What a ring drops is counted in
  `s.dropped`.
- With the native kernel, hits wait in native rings and are collected when a session is read,
  opened or closed; each is routed by the thread it happened in (the sessions that thread had
  open), which matches the contextvars rule for plain threads.
- ``session(path=...)`` also streams every hit to a recording directory as it happens, so a run
  that crashes still leaves a loadable file.
- While a session is open, graph breaks, recompiles and compiles are collected from torch's
  structured trace (`dynstep.recording.compile_log`); a recording keeps what the compile log got
  since the session was made, plus the plans of graphs compiled before that its hits name, with
  the run's facts (compile.jsonl, run.json), whether streamed or saved.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path

from ..core.errors import OptionsError, SessionError
from ..core.records import Snapshot
from ..core.sites import SITES
from ..graph.filter import filter_records
from ..recording.facts import RunInfo
from ..recording.paths import rank_path
from ..recording.storage import Writer, save
from ..recording.compile_log import COMPILE_LOG
from . import rings, runtime

_active: contextvars.ContextVar[tuple["Session", ...]] = contextvars.ContextVar("dynstep_sessions",
                                                                                 default=())
_open_lock = threading.Lock()
_delivery_lock = threading.Lock()  # _update_delivery: decide and switch as one step
_open: list["Session"] = []
_by_thread: dict[int, tuple["Session", ...]] = {}


def _drain() -> None:
    rings.drain_native()


class Session:
    def __init__(self, *, summaries: int = 1024, all_threads: bool = False, path: str | Path | None = None,
                 name: str = "session") -> None:
        if isinstance(summaries, bool) or not isinstance(summaries, int) or summaries < 1:
            raise OptionsError(f"dynstep.session(summaries={summaries!r}): expected a positive integer, the number "
                               "of stats-only hits kept per probe (default 1024)")
        if not isinstance(all_threads, bool):
            raise OptionsError(f"dynstep.session(all_threads={all_threads!r}): expected True or False")
        self.name = name
        self.summaries = summaries
        self.all_threads = all_threads
        self._lock = threading.Lock()
        self._rings: dict[int, collections.deque[Snapshot]] = {}
        self.dropped: collections.Counter[str] = collections.Counter()
        self.dropped_by_memory_cap = 0  # of those, dropped to keep under the record memory cap
        self._writer = None
        self.run = RunInfo.now(session=name)
        self._log_start = COMPILE_LOG.mark()   # a recording keeps the compile log from here on
        if path is not None:
            self._writer = Writer(rank_path(Path(path)), run=self.run, compile_log=COMPILE_LOG)
        self._token: contextvars.Token | None = None
        self._thread: int | None = None       # the thread that entered the session
        self.unwritten = 0                     # hits the recording could not take (kept in the rings)

    def __repr__(self) -> str:
        where = f", recording to {self._writer.path}" if self._writer is not None else ""
        return f"<dynstep session {self.name!r}{where}>"

    # -- collecting -------------------------------------------------------------------------
    def add(self, snap: Snapshot) -> None:
        capacity = self._capacity(snap)
        with self._lock:
            ring = self._rings.get(snap.site)
            if ring is None:
                ring = self._rings[snap.site] = collections.deque(maxlen=capacity)
            if len(ring) == ring.maxlen:
                self.dropped[snap.probe] += 1
            ring.append(snap)
        if self._writer is not None:
            self._write(snap)

    def _write(self, snap: Snapshot) -> None:
        try:
            self._writer.append(snap)
        except OSError as exc:   # disk full, recording closed: the hit stays in the ring, the model goes on
            self.unwritten += 1
            if self.unwritten == 1:
                warnings.warn(f"dynstep: a hit could not be written to the recording {self._writer.path} "
                              f"({exc}); it is kept in the session (Session.unwritten counts them)",
                              RuntimeWarning, stacklevel=2)

    def _capacity(self, snap: Snapshot) -> int:
        if snap.tensor is not None:
            try:
                return SITES.get(snap.site).capacity
            except KeyError:
                return self.summaries
        return self.summaries

    def extend(self, snaps: Iterable[Snapshot]) -> None:
        for s in snaps:
            self.add(s)

    # -- reading ----------------------------------------------------------------------------
    def all(self) -> list[Snapshot]:
        _drain()
        with self._lock:
            snaps = [s for ring in self._rings.values() for s in ring]
        return sorted(snaps, key=lambda s: s.seq)

    def records(self, selector: str | None = None, *, kind: str | None = None,
                rank: int | None = None) -> list[Snapshot]:
        """Snapshots in hit order, filtered with the selector grammar (None: all) and by rank."""
        return filter_records(self.all(), selector, kind, rank)

    def __len__(self) -> int:
        _drain()
        with self._lock:
            return sum(len(r) for r in self._rings.values())

    def save(self, path: str | Path) -> Path:
        """Write the recording (in a multi-rank job: PATH/rank<N>, one per rank)."""
        snaps = self.all()
        return save(snaps, rank_path(Path(path)), run=self.run.closed(sum(self.dropped.values())),
                    compile=COMPILE_LOG.for_recording(self._log_start, {s.graph for s in snaps}))

    def clear(self) -> None:
        _drain()
        with self._lock:
            self._rings.clear()
            self.dropped.clear()

    # -- scope ------------------------------------------------------------------------------
    def __enter__(self) -> "Session":
        if self._thread is not None:
            raise SessionError(f"{self!r} is already open (entered in thread {self._thread}); a session is entered "
                               "once at a time: open another one with dynstep.session()")
        _drain()  # hits before this point belong to the scope that was open then
        COMPILE_LOG.acquire()   # graph breaks are logged while Dynamo traces: collect before any compile
        self._thread = threading.get_ident()
        self._token = _active.set(_active.get() + (self,))
        with _open_lock:
            _open.append(self)
            _by_thread[threading.get_ident()] = _active.get()
        _update_delivery()
        return self

    def __exit__(self, *exc) -> None:
        here = threading.get_ident()
        if self._thread is not None and self._thread != here:
            raise SessionError(f"{self!r} was entered in thread {self._thread} and must be exited there, "
                               f"not in thread {here} (sessions follow the thread's context)")
        _drain()
        if self._thread is not None:
            COMPILE_LOG.release()
        self._thread = None
        if self._token is not None:
            _active.reset(self._token)
            self._token = None
        with _open_lock:
            if self in _open:
                _open.remove(self)
            _by_thread[threading.get_ident()] = _active.get()
        _update_delivery()
        if self._writer is not None:
            self._writer.close(run=self.run.closed(sum(self.dropped.values())))


def _update_delivery() -> None:
    """Streaming sessions, and sessions in several threads, need every hit delivered as it happens.

    Deciding and switching happen under one lock: two threads opening and closing sessions at
    once must not leave the switch in the state the first of them decided on."""
    with _delivery_lock:
        with _open_lock:
            threads = {t for t, scope in _by_thread.items() if any(x in _open for x in scope)}
            immediate = any(x._writer is not None for x in _open) or len(threads) > 1
        rings.set_immediate(immediate)


_default = Session(name="default")


def default_session() -> Session:
    """Where hits go when no session is open (bounded rings, like any session)."""
    return _default


def deliver(snap: Snapshot, *, thread: int | None = None) -> None:
    """Give a hit to the sessions in scope: the current context, or those `thread` had open.

    A hit handed over without its order (`seq` 0: a value the REPL's `record` copies at a stop) takes
    the next one now, so it sorts after the hits that came before it, not before every hit of the run."""
    if snap.seq <= 0:
        snap = dataclasses.replace(snap, seq=runtime.next_seq())
    if thread is None or thread == threading.get_ident():
        targets = _active.get()
    else:
        with _open_lock:
            targets = tuple(s for s in _by_thread.get(thread, ()) if s in _open)
    if not targets:
        with _open_lock:
            wide = [s for s in _open if s.all_threads]
            targets = tuple(wide) if wide else ((_open[-1],) if _open else (_default,))
    for s in targets:
        s.add(snap)


def count_dropped(probe: str, ring: int, memory: int) -> None:
    """Hits native rings dropped before they were collected (ring overflow or memory cap)."""
    targets = _active.get()
    if not targets:
        with _open_lock:
            targets = tuple(_open) or (_default,)
    for s in targets:
        with s._lock:
            s.dropped[probe] += ring + memory
            if memory:
                s.dropped_by_memory_cap += memory


class _Destination:
    """What the probe runtime hands hits to (connected by dynstep.probe.registration)."""

    deliver = staticmethod(deliver)
    count_dropped = staticmethod(count_dropped)


DESTINATION = _Destination()


def session(**kwargs) -> Session:
    """Open a session: ``with dynstep.session() as s: ...`` (see the module docstring)."""
    return Session(**kwargs)
