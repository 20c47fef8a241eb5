"""The lockstep of a distributed job over the process group's store (docs/distributed.md).

Every rank runs the same compiled graphs, so every rank meets the same stop points in the same
order; each one is a store barrier, numbered k = 0, 1, 2, ... on every rank:

  1. a rank chosen to pause (`ranks`) that stops at #k marks ``paused/<rank>``, raises its
     collective timeout, takes the terminal turn and runs its front end; the others are held in
     step 2, on the store, with no collective in flight;
  2. every rank arrives: ``n = add(arr/<k>, 1)``; the last one sets ``go/<k>`` (and clears #k-1);
     the others poll for ``go/<k>``, meanwhile answering commands sent to them (``p@1 ...``),
     watching ``quit`` and the heartbeats of the ranks not there yet.

No wait is unbounded: a dead rank ends the job (DYNSTEP_DEAD_AFTER); live ranks that stop coming
(the ranks' stop points no longer line up) are waited for DYNSTEP_LOCKSTEP_WAIT seconds while nobody
moves or pauses, then this rank says so, sets ``lockstep_lost`` (every other rank goes on too, at
its next look) and runs on without barriers (`detached`), pausing as in a single process.

A graph call that could run with or without stop points (`TwoVariants`) first agrees with the
other ranks (`agree`, a barrier whose answer is "does any rank want stop points").

    coord = Coordinator(ranks="all")
    coord.stop_point(site, pause=lambda: ..., serve=lambda line: [events])
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .. import _compat
from ..core.events import Info, Warning_, emit
from ..core.sites import Site
from . import forward, identity
from .exits import QUIT_CODE, TermGuard, quitting
from .liveness import Heartbeat, LockstepLost, TurnWatch, Watch
from .ranks import check_job
from .store import Backoff, counter, open_store, read

STATUS_EVERY = 0.05     # while waiting: requests, quit, paused ranks, heartbeats this often (s)
ANSWER_TIMEOUT = 60.0   # p@N waits this long for rank N's answer (s)
Serve = Callable[[str], list]


def for_job(ranks: str | tuple[int, ...] | None) -> "Coordinator | None":
    """The coordinator for the stepper's slot: in a distributed job (or when ranks are named), else None."""
    if ranks is None and not identity.current().multi:
        return None
    return Coordinator(ranks)


class Coordinator:
    def __init__(self, ranks: str | tuple[int, ...] | None = None) -> None:
        self.ranks = ranks
        self.k = 0              # the next stop point's number
        self.here = -1          # the stop point in progress
        self.ident: identity.Identity | None = None
        self.pausers: frozenset[int] = frozenset()
        self.store: Any = None
        self.saved_timeout: timedelta | None = None
        self.heartbeat: Heartbeat | None = None
        self.pauses = 0         # this rank's stops so far (names a pause in paused/<rank>)
        self.coarse = False     # this graph call: barriers at pause sites only (see agree)
        self.serving: Serve | None = None   # this rank's own commands while it is paused (idle answers with them)
        self.detached = False   # the lockstep was lost: no more barriers on this rank (see the module docstring)

    # -- resolving the job, lazily (the first stop point at run time) --------------------------------
    def resolve(self) -> identity.Identity:
        if self.ident is None:
            ident = identity.current()
            self.pausers = check_job(self.ranks, ident)
            if ident.multi:
                self.store = open_store(ident)
                self.heartbeat = Heartbeat(self.store.clone(), ident.rank)
            self.ident = ident
        return self.ident

    def set_ranks(self, ranks: str | tuple[int, ...] | None) -> None:
        """The ranks that pause, as a later compile's options say (checked again once the job is known)."""
        self.ranks = ranks
        if self.ident is not None:
            self.pausers = check_job(ranks, self.ident)

    @property
    def alone(self) -> bool:
        return not self.resolve().multi

    @property
    def unlocked(self) -> bool:
        """No barriers here: one process, or the lockstep was lost."""
        return self.alone or self.detached

    def may_pause(self) -> bool:
        return self.resolve().rank in self.pausers

    # -- the two barriers ----------------------------------------------------------------------------
    def agree(self, want: bool, fine: bool = True) -> bool:
        """A graph call with two variants: True when any rank wants the one with stop points.

        `fine`: this rank may stop at a step point of this call (stepping, a breakpoint in the graph,
        an interrupt). When no rank may, the call's step points are no barriers, only its pause sites
        (every rank sees the same answer, so the barriers stay in step); `end_call()` ends that."""
        if self.unlocked:
            return want
        k = self._next()
        if want:
            self.store.add(f"want/{k}", 1)
        if fine:
            self.store.add(f"fine/{k}", 1)
        verdict = self._barrier(k, {"node": "(graph call)"}, None)
        if verdict is None:
            return want
        wants, fines = verdict
        self.coarse = wants > 0 and fines == 0
        return wants > 0

    def end_call(self) -> None:
        self.coarse = False

    def stop_point(self, site: Site, pause: Callable[[], bool], serve: Serve) -> None:
        """One stop point: this rank's own stop (when it may pause), then the barrier.

        `pause()` returns whether this rank may now stop at any node (it stepped, set a breakpoint):
        then the rest of the call has barriers at every stop point again, on every rank."""
        if self.unlocked:
            pause()
            return
        if self.coarse and site.actions != ("pause",):
            return   # agreed: no rank stops at a step point here
        k = self._next()
        if self.may_pause() and pause():
            self.store.add(f"fine/{k}", 1)
        verdict = self._barrier(k, {"node": site.node, "graph": site.graph, "source": site.source}, serve)
        if verdict is not None and verdict[1]:
            self.coarse = False

    def _next(self) -> int:
        self.here, self.k = self.k, self.k + 1
        return self.here

    def _barrier(self, k: int, where: dict, serve: Serve | None) -> tuple[int, int] | None:
        """Wait until every rank is at stop point k; how many wanted stop points, and fine ones (agree).
        None: the lockstep is lost (said why), this rank goes on without it."""
        s, rank, world = self.store, self.ident.rank, self.ident.world
        try:
            if (lost := read(s, "lockstep_lost")) is not None:
                raise LockstepLost(0.0, json.loads(lost))
            s.set(f"at/{rank}", json.dumps({"k": k, **where}))
            if s.add(f"arr/{k}", 1) == world:
                s.set(f"go/{k}", f"go:{counter(s, f'want/{k}')}:{counter(s, f'fine/{k}')}")
                for key in (f"arr/{k - 1}", f"go/{k - 1}", f"want/{k - 1}", f"fine/{k - 1}"):
                    s.delete_key(key)
            else:
                with TermGuard(lambda: self._waiting_for(k)):
                    self._wait(k, serve)
            verdict = read(s, f"go/{k}")   # set: _wait saw it, and it goes only once every rank is at k + 1
            if verdict is None:
                raise LockstepLost(0.0, {"rank": rank, "why": f"the release of stop #{k} vanished from the store"})
        except LockstepLost as lost:
            self._detach(k, lost)
            return None
        except RuntimeError as exc:   # DistNetworkError, DistStoreError: the store went away
            raise self._lost_store(k, exc) from None
        if verdict.startswith("quit"):
            self._on_quit()
        _, wants, fines = verdict.split(":")
        return int(wants), int(fines)

    def _wait(self, k: int, serve: Serve | None) -> None:
        s, poll = self.store, Backoff()
        watch = Watch(self, k)
        next_look = time.monotonic() + STATUS_EVERY
        while not s.check([f"go/{k}"]):
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + STATUS_EVERY
                self._look_around(watch, serve)
            poll.sleep()
        watch.done()

    def _look_around(self, watch: "Watch", serve: Serve | None) -> None:
        if self.store.check(["quit"]):
            self._on_quit()
        if (lost := read(self.store, "lockstep_lost")) is not None:
            raise LockstepLost(0.0, json.loads(lost))
        if serve is not None:
            self.answer_requests(serve)
        watch.look()

    # -- a pause on this rank ------------------------------------------------------------------------
    def enter_pause(self, info: dict[str, str], serve: Serve | None = None, turn: bool = True,
                    follow: bool = True) -> str | None:
        """Before this rank's front end runs: mark the pause, raise the collective timeout, wait for
        the terminal turn (`turn`: front ends that share the launcher's terminal; an editor's sessions
        are one per rank). Returns a command to run instead of asking (`step --all` from another rank;
        `follow=False`: a stop no `step --all` reaches, a compile-time stop)."""
        if self.alone:
            return None
        self.pauses += 1
        rank = self.ident.rank
        info = {**info, "attach": _attach_address(self.ident)}
        self.store.set(f"paused/{rank}", json.dumps({"k": self.here, "pause": self.pauses, **info}))
        self.raise_timeout()
        self.serving = serve
        step = self._take_turn(serve, follow) if turn else read(self.store, f"follow/{self.here}") if follow else None
        if step is not None:
            emit(Info(f"dynstep: rank {rank} steps with the other paused ranks (step --all)"))
        return step

    def idle(self) -> None:
        """While this rank's front end holds a stop without the terminal turn (an editor's session, which
        calls this every 50 ms): answer what other ranks ask it (`p@R`) and follow a `q` given on another rank."""
        if self.ident is None or not self.ident.multi or self.store is None:
            return
        try:
            if self.store.check(["quit"]):
                self._on_quit()
            self.answer_requests(self.serving)
        except RuntimeError as exc:   # DistNetworkError, DistStoreError: the store is gone, as at a barrier
            raise self._lost_store(self.here, exc) from None

    def leave_pause(self) -> None:
        if self.alone:
            return
        self.serving = None
        rank = self.ident.rank
        self.store.delete_key(f"paused/{rank}")
        self.store.compare_set("turn", str(rank), "")
        self.restore_timeout()

    def _take_turn(self, serve: Serve | None, follow: bool = True) -> str | None:
        """One paused rank at a time talks to the terminal; a waiting one follows `step --all`. A turn
        whose holder is dead or no longer paused is taken over (liveness.TurnWatch), never waited on for ever."""
        s, mine, poll, watch = self.store, str(self.ident.rank), Backoff(cap=0.05), TurnWatch(self.store)
        while (holder := s.compare_set("turn", "", mine).decode()) != mine:
            step = read(s, f"follow/{self.here}") if follow else None
            if step is not None:
                return step
            if s.check(["quit"]):
                self._on_quit()
            if (why := watch.abandoned(holder)) is not None and s.compare_set("turn", holder, mine).decode() == mine:
                emit(Warning_(f"dynstep: {why}; rank {mine} takes it"))
                break
            self.answer_requests(serve)
            poll.sleep()
        return read(s, f"follow/{self.here}") if follow else None   # `step --all` may have come just then

    def step_all(self) -> None:
        """`step --all`: every other rank paused at this stop point steps too, without asking."""
        if not self.alone:
            self.store.set(f"follow/{self.here}", "step")

    def raise_timeout(self) -> None:
        if self.saved_timeout is None and self.ident is not None and self.ident.has_group:
            self.saved_timeout = _compat.pg_timeout()
            if self.saved_timeout is not None:
                _compat.set_pg_timeout(timedelta(days=1))

    def restore_timeout(self) -> None:
        if self.saved_timeout is not None:
            _compat.set_pg_timeout(self.saved_timeout)
            self.saved_timeout = None

    # -- commands for another rank (p@1 ...) ---------------------------------------------------------
    def forward(self, rank: int, line: str) -> list[object]:
        """Send a command to `rank` (waiting or paused at this stop point) and return its answer."""
        ident = self.resolve()
        if not 0 <= rank < ident.world:
            raise ValueError(f"rank {rank} does not exist in this job of {ident.world} rank(s) (0-{ident.world - 1})")
        if rank == ident.rank:
            raise ValueError(f"rank {rank} is this rank; run the command without @{rank}")
        ticket = int(self.store.add(f"tickets/{rank}", 1))
        self.store.set(f"req/{rank}/{ticket}", json.dumps({"from": ident.rank, "line": line}))
        deadline, poll = time.monotonic() + ANSWER_TIMEOUT, Backoff(cap=0.05)
        while time.monotonic() < deadline:
            answer = read(self.store, f"resp/{rank}/{ticket}")
            if answer is not None:
                self.store.delete_key(f"resp/{rank}/{ticket}")
                return forward.decode(answer)
            poll.sleep()
        raise TimeoutError(f"rank {rank} did not answer {line!r} within {ANSWER_TIMEOUT:.0f} s (it answers while it "
                           "waits at a stop point; `ranks` shows where it is)")

    def answer_requests(self, serve: Serve | None) -> None:
        s, rank = self.store, self.ident.rank
        done = counter(s, f"served/{rank}")
        if counter(s, f"tickets/{rank}") <= done:
            return
        ticket = done + 1
        request = read(s, f"req/{rank}/{ticket}")
        if request is None:
            return
        line = json.loads(request)["line"]
        events = serve(line) if serve is not None else [Info(f"rank {rank} is paused at its own prompt; "
                                                               "ask it there")]
        s.set(f"resp/{rank}/{ticket}", forward.encode(events))
        s.delete_key(f"req/{rank}/{ticket}")
        s.add(f"served/{rank}", 1)

    def where(self) -> list[str]:
        """`ranks`: one line per rank, where it is."""
        ident = self.resolve()
        lines = []
        for r in range(ident.world):
            at = json.loads(read(self.store, f"at/{r}") or '{"k": -1}') if not self.alone else {"k": self.here}
            paused = read(self.store, f"paused/{r}") if not self.alone else None
            if paused:
                at = json.loads(paused)
            state = "paused" if paused else ("running" if at["k"] < self.here else "waiting")
            if r == ident.rank:
                state, at = "paused (this prompt)", {**at, "k": self.here}
            lines.append(f"rank {r}: {state} at stop #{at['k']} {at.get('node', '-')}"
                         f"{'  (may pause)' if r in self.pausers else ''}")
        return lines

    # -- ending ---------------------------------------------------------------------------------------
    def quit_all(self, reason: str, code: int = QUIT_CODE, *, gone: int = 0) -> BaseException:
        """Tell every rank to stop (they print why and exit with `code`); returns what to raise here.
        `gone`: ranks known dead, whose acknowledgement is not waited for."""
        if self.alone:
            return quitting(code)
        s = self.store
        s.set("quit", json.dumps({"rank": self.ident.rank, "code": code, "reason": reason}))
        s.set(f"go/{self.here}", f"quit:{code}")
        emit(Info(f"dynstep: quitting every rank: {reason}"))
        deadline = time.monotonic() + 3.0
        while counter(s, "quit_ack") < self.ident.world - 1 - gone and time.monotonic() < deadline:
            time.sleep(0.02)
        self.close()
        return quitting(code)

    def _on_quit(self) -> None:
        q = json.loads(read(self.store, "quit") or '{"reason": "the job is quitting"}')
        emit(Info(f"dynstep: rank {self.ident.rank} stops: {q['reason']}"))
        self.store.add("quit_ack", 1)
        self.close()
        raise quitting(int(q.get("code", QUIT_CODE)))

    def _waiting_for(self, k: int) -> str:
        missing = []
        for r in range(self.ident.world):
            at = json.loads(read(self.store, f"at/{r}") or '{"k": -1}')
            paused = read(self.store, f"paused/{r}")
            if paused is not None and r != self.ident.rank:
                info = json.loads(paused)
                missing.append(f"rank {r} (paused at stop #{info['k']} {info.get('node', '')})")
            elif r != self.ident.rank and at["k"] < k:
                missing.append(f"rank {r} (last seen at stop #{at['k']} {at.get('node', '')})")
        return f"rank {self.ident.rank} waited at stop #{k} for {', '.join(missing) or 'the other ranks'}"

    def _detach(self, k: int, lost: LockstepLost) -> None:
        """Go on without the lockstep: say why, tell the other ranks (they go on too), no more barriers here."""
        self.detached, rank = True, self.ident.rank
        if lost.by is not None and lost.by.get("rank") != rank:
            why = f"rank {lost.by.get('rank')} gave up the lockstep first: {lost.by.get('why', '')}"
        else:
            why = (lost.by or {}).get("why") or (
                f"{self._waiting_for(k)} for {lost.seconds:.0f} s while no rank moved or paused: they run but do not "
                "come to this stop point (their stop points no longer line up with this rank's, e.g. a graph "
                "compiled differently on one rank; DYNSTEP_LOCKSTEP_WAIT sets how long to wait)")
            try:
                self.store.set("lockstep_lost", json.dumps({"rank": rank, "k": k, "why": why}))
            except RuntimeError:
                pass   # the store is gone: the others find that out themselves
        emit(Warning_(f"dynstep: rank {rank} stops waiting for the other ranks at stop points: {why}. It runs on "
                      "alone; its pauses no longer hold the other ranks"))
        self.coarse = False
        self.restore_timeout()

    def _lost_store(self, k: int, exc: Exception) -> BaseException:
        first = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        emit(Info(f"dynstep: rank {self.ident.rank} lost the job's store at stop #{k} ({first}); the store lives in "
                  "torchrun's agent, or in rank 0 without torchrun: did it die?"))
        self.close()
        return quitting(QUIT_CODE)

    def close(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
        self.restore_timeout()


def _attach_address(ident: identity.Identity) -> str:
    """Where a client can answer this rank's pause: the job's debug adapter (DYNSTEP_DAP_JOB, set by
    `dynstep run --dap PORT -m torch.distributed.run`), else its own DAP server (DYNSTEP_DAP: PORT + local rank)."""
    job = os.environ.get("DYNSTEP_DAP_JOB", "").strip()
    if job:
        return f"dynstep attach {job} (thread: rank {ident.rank})"
    address = os.environ.get("DYNSTEP_DAP", "").strip()
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return f"rank {ident.rank}'s prompt"
    return f"dynstep attach {host or '127.0.0.1'}:{int(port) + ident.local_rank}"
