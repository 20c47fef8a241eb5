"""Is every rank still there, and still coming? Heartbeats on the store, and what a waiting rank watches.

Each rank's heartbeat thread adds 1 to ``hb/<rank>`` every second on its own store connection
(a store client is not shared across threads). A waiting rank reads the counters of the ranks
that have not arrived; one that has not changed for DYNSTEP_DEAD_AFTER seconds (default 30) ends
the job with a message naming that rank, instead of waiting forever.

A rank that is alive, not paused, and does not come either (its stop points no longer line up
with the others': it waits in a collective for a rank that waits for it here) is waited for
DYNSTEP_LOCKSTEP_WAIT seconds (default 600) while nobody moves; then `LockstepLost` says so and the
waiting rank goes on without the lockstep (jobs/coordinator.py). A paused rank anywhere, or a rank
reaching another stop point, starts that time again. The terminal turn (`TurnWatch`) is bounded the
same way: a turn held by a rank that is dead, or no longer paused, is taken over.

    hb = Heartbeat(store.clone(), rank); ...; hb.stop()
"""

from __future__ import annotations

import atexit
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from ..core.events import Info, emit
from ..core.options import env_value
from .store import counter, read

if TYPE_CHECKING:
    from .identity import Identity


class Coordinator(Protocol):
    """What a rank's wait needs of the coordinator that starts it (jobs/coordinator.py's Coordinator)."""

    ident: "Identity | None"
    store: Any

    def raise_timeout(self) -> None: ...

    def restore_timeout(self) -> None: ...

    def quit_all(self, reason: str, code: int = ..., *, gone: int = 0) -> BaseException: ...

PERIOD = 1.0


class Heartbeat:
    def __init__(self, store: Any, rank: int) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(store, rank), name="dynstep-heartbeat", daemon=True)
        self._thread.start()
        # stopped before the interpreter tears down: a daemon thread inside a store call at exit
        # aborts the process ("terminate called without an active exception")
        atexit.register(self.stop)

    def _beat(self, store: Any, rank: int) -> None:
        while not self._stop.is_set():
            try:
                store.add(f"hb/{rank}", 1)
            except Exception:   # the store is gone: the waiting side reports it
                return
            self._stop.wait(PERIOD)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)


def dead_after() -> float:
    """DYNSTEP_DEAD_AFTER seconds (2 to 86400, checked with its name in the error; default 30)."""
    value = env_value("DYNSTEP_DEAD_AFTER")
    return 30.0 if value is None else float(value)


def lockstep_wait() -> float:
    """DYNSTEP_LOCKSTEP_WAIT seconds (2 to 86400, checked with its name in the error; default 600)."""
    value = env_value("DYNSTEP_LOCKSTEP_WAIT")
    return 600.0 if value is None else float(value)


class LockstepLost(Exception):
    """This rank waited `seconds` at a stop point for live ranks that never came (or another rank said
    so first: `by`); the coordinator lets it go on without the lockstep."""

    def __init__(self, seconds: float, by: dict | None = None) -> None:
        super().__init__(f"waited {seconds:.0f} s")
        self.seconds, self.by = seconds, by


class Watch:
    """What a rank waiting at stop point k looks at every few hundredths of a second."""

    def __init__(self, coord: "Coordinator", k: int) -> None:
        self.coord, self.k = coord, k
        self.announced: set[tuple[int, int]] = set()
        self.seen: dict[int, tuple[int, float]] = {}
        self.raised = False
        self.limit = dead_after()
        self.stall_limit = lockstep_wait()
        self.where: tuple[str | None, ...] = ()
        self.still_since = time.monotonic()
        self.next_beat_check = time.monotonic() + PERIOD

    def look(self) -> None:
        ident, s = self.coord.ident, self.coord.store
        assert ident is not None
        beats = time.monotonic() >= self.next_beat_check
        anyone_paused = False
        for r in range(ident.world):
            if r == ident.rank:
                continue
            paused = read(s, f"paused/{r}")
            if paused is not None:
                anyone_paused = True
                self._announce(r, json.loads(paused))
            if beats:
                self._check_heartbeat(r)
        if beats:
            self._check_progress(anyone_paused)
            self.next_beat_check = time.monotonic() + PERIOD

    def _announce(self, r: int, info: dict) -> None:
        if not self.raised:
            self.coord.raise_timeout()
            self.raised = True
        if (r, info.get("pause", 0)) in self.announced:
            return
        self.announced.add((r, info.get("pause", 0)))
        where = info.get("attach") or f"rank {r}'s prompt"
        emit(Info(f"dynstep: rank {self.coord.ident.rank} waits at stop #{self.k}: rank {r} is paused at node "
                  f"{info.get('node')} ({info.get('source') or info.get('graph', '')}); answer it at {where}"))

    def _check_heartbeat(self, r: int) -> None:
        s, now = self.coord.store, time.monotonic()
        at = json.loads(read(s, f"at/{r}") or '{"k": -1}')
        if at["k"] >= self.k:
            return   # it is here already
        beat = counter(s, f"hb/{r}")
        last = self.seen.get(r)
        if last is None or last[0] != beat:
            self.seen[r] = (beat, now)
        elif now - last[1] > self.limit:
            me = self.coord.ident.rank
            raise self.coord.quit_all(
                f"rank {r} is not responding (no heartbeat for {now - last[1]:.0f} s; last seen at stop #{at['k']} "
                f"{at.get('node', '')}) while rank {me} waited at stop #{self.k}: it may have died", gone=1)

    def _check_progress(self, anyone_paused: bool) -> None:
        """LockstepLost once no rank has moved (to another stop point, or into a pause) for the limit."""
        ident, s, now = self.coord.ident, self.coord.store, time.monotonic()
        where = tuple(read(s, f"at/{r}") for r in range(ident.world) if r != ident.rank)
        if anyone_paused or where != self.where:
            self.where, self.still_since = where, now
        elif now - self.still_since > self.stall_limit:
            raise LockstepLost(now - self.still_since)

    def done(self) -> None:
        if self.raised:
            self.coord.restore_timeout()


class TurnWatch:
    """While this rank waits for the terminal turn: is its holder still there and still paused?"""

    GRACE = 2.0     # a rank leaving its pause deletes paused/<rank> just before it gives the turn back

    def __init__(self, store: Any) -> None:
        self.store = store
        self.holder = ""
        self.since = time.monotonic()
        self.beat = -1
        self.beat_since = time.monotonic()

    def abandoned(self, holder: str) -> str | None:
        """Why the turn `holder` has is abandoned (dead, or not paused for a while), or None."""
        now = time.monotonic()
        if holder != self.holder:
            self.holder, self.since, self.beat, self.beat_since = holder, now, -1, now
        if not holder.isdigit():
            return None
        if read(self.store, f"paused/{holder}") is not None:
            self.since = now
        elif now - self.since > self.GRACE:
            return f"rank {holder} held the terminal turn without being paused for {now - self.since:.0f} s"
        beat = counter(self.store, f"hb/{holder}")
        if beat != self.beat:
            self.beat, self.beat_since = beat, now
        elif now - self.beat_since > dead_after():
            return f"rank {holder} held the terminal turn and is not responding (no heartbeat for {now - self.beat_since:.0f} s)"
        return None
