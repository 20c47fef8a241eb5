"""The worker side of the job's adapter (job.py): one DAP client per rank's server, connected, handed
the session so far, and its events passed on to the adapter's client as that client should see them.

    class JobAdapter(WorkerSide): ...        # the mixin's methods run on the adapter's state
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .client import ClientError, DapClient
from .jobids import JobIds, hits_to_client, learn, to_client
from .protocol import Connection
from .session import ClientSession

CONFIG = frozenset({"setBreakpoints", "setFunctionBreakpoints", "setExceptionBreakpoints"})
SEND_TIMEOUT_S = 5.0     # a rank that stops reading (SIGSTOP) is dropped, not waited for under the adapter's lock


class Worker:
    """One rank's DAP server, as the adapter sees it."""

    def __init__(self, index: int, address: tuple[str, int]) -> None:
        self.index, self.address = index, address
        self.rank = index                      # the job's rank, once the worker's `process` event says it
        self.link: DapClient | None = None     # live: attached and replayed
        self.threads: set[int] = set()         # this adapter's ids of the worker's threads
        self.bp_ids: dict[int, int] = {}       # the worker's breakpoint id -> the client's
        self.exit_code: int | None = None


class WorkerSide:
    """Mixed into `JobAdapter`: the workers and the links to them."""

    lock: threading.RLock
    conn: Connection | None
    ended: threading.Event
    workers: list[Worker]
    ids: JobIds
    token: str | None
    session: ClientSession
    history: list[tuple[str, dict[str, Any], tuple[int, ...]]]
    event: Any            # the endpoint's: (name, body=None, conn=None)
    _output: Any

    def _lead(self) -> int | None:
        return next((w.index for w in self.workers if w.link is not None), None)

    def _send(self, worker: Worker, command: str, args: dict[str, Any], on_response: Any) -> None:
        link = worker.link
        if link is None:
            if on_response is not None:
                on_response(None)   # every request the client sent gets its answer
            return
        try:
            link.send(command, args, on_response=on_response or (lambda msg: None))
        except OSError:
            link.close()      # its reader ends, answers the waiters with None and the worker is dropped

    def _broadcast(self, command: str, args: dict[str, Any]) -> None:
        for worker in self.workers:
            self._send(worker, command, self.ids.down(args), None)

    def _connect_loop(self, worker: Worker, conn: Connection) -> None:
        """Connect, replay the session, forward its events; again if the worker's server goes and comes."""
        while self.conn is conn and not self.ended.is_set():
            try:
                link = DapClient(*worker.address, timeout=10.0, queue_events=False, send_timeout=SEND_TIMEOUT_S,
                                 on_message=lambda msg, w=worker: self._from_worker(w, msg, conn))
            except OSError:
                time.sleep(0.2)
                continue
            refused = self._handshake(link)
            if refused is not None:
                link.close()
                if not refused:            # no answer: a server going away as its rank ends; try again
                    time.sleep(0.2)
                    continue
                self._output(conn, f"dynstep: local rank {worker.index}'s debug adapter refused the job: {refused}")
                return
            if not self._replay(worker, link, conn):
                link.close()
                if self.conn is not conn:
                    return
                continue
            link.closed.wait()
            link.close()
            self._worker_gone(worker, link, conn)
            if worker.exit_code == 0:
                return                 # the rank is done; after a failure torchrun may start it again

    def _replay(self, worker: Worker, link: DapClient, conn: Connection) -> bool:
        """The session so far, in its order, to a worker that just attached; then it is live."""
        with self.lock:
            if self.conn is not conn:
                return False
            worker.bp_ids, lead = {}, self._lead()
            leads = lead is None or lead > worker.index     # its answers become the client's
            try:
                for command, args, ids in self.history:
                    then = self._changed(worker, conn) if leads and command in CONFIG and ids else None
                    link.send(command, self.ids.down(args), on_response=self._learn(worker, ids, then))
            except OSError:
                return False
            worker.link, worker.exit_code = link, None
        return True

    def _changed(self, worker: Worker, conn: Connection) -> Any:
        """A late lead's answer to a replayed breakpoint request: `breakpoint` events tell the client."""
        def answered(msg: dict[str, Any] | None) -> None:
            bps = ((msg or {}).get("body") or {}).get("breakpoints") if msg and msg.get("success") else None
            for bp in bps if isinstance(bps, list) else []:
                if isinstance(bp, dict) and bp.get("id") in worker.bp_ids and self.conn is conn:
                    body = to_client(worker.bp_ids, self.ids.up(worker.index, bp))
                    self.event("breakpoint", {"reason": "changed", "breakpoint": body}, conn)
        return answered

    def _handshake(self, link: DapClient) -> str | None:
        """initialize and attach: None when attached, "" when the server did not answer, else why it refused."""
        for command, args in (("initialize", {"adapterID": "dynstep", "clientID": "dynstep-job", "linesStartAt1": True,
                                              "columnsStartAt1": True, "pathFormat": "path",
                                              "supportsVariablePaging": self.session.client_paging}),
                              ("attach", {"token": self.token} if self.token else {})):
            try:
                msg = link.response(command, args)
            except (ClientError, OSError):
                return ""
            if not msg.get("success"):
                return str(msg.get("message") or f"{command} failed")
        return None

    def _worker_gone(self, worker: Worker, link: DapClient, conn: Connection) -> None:
        with self.lock:
            if worker.link is not link:
                return                  # a newer session's link: not ours to drop
            worker.link = None
            threads, worker.threads = sorted(worker.threads), set()
        for tid in threads:
            self.event("thread", {"reason": "exited", "threadId": tid}, conn)
        if worker.exit_code is None and self.conn is conn and not self.ended.is_set():
            self._output(conn, f"dynstep: rank {worker.rank}'s debug adapter closed its connection")

    def _from_worker(self, worker: Worker, msg: dict[str, Any], conn: Connection) -> None:
        """An event from a worker (its reader thread), passed on as the client of its session should see it."""
        if self.conn is not conn or msg.get("type") != "event":
            return
        name, body = msg.get("event"), msg.get("body") or {}
        if name == "process":
            if type(body.get("dynstepRank")) is int:
                worker.rank = body["dynstepRank"]
            return
        if name in ("initialized", "terminated"):
            return
        if name == "exited":
            worker.exit_code = body.get("exitCode")
            return self._output(conn, f"dynstep: rank {worker.rank} exited with code {worker.exit_code}")
        if name == "breakpoint" and worker.index != self._lead():
            return
        body = self.ids.up(worker.index, body)
        if name == "breakpoint":
            body["breakpoint"] = to_client(worker.bp_ids, body.get("breakpoint"))
        if "hitBreakpointIds" in body:
            body["hitBreakpointIds"] = hits_to_client(worker.bp_ids, body["hitBreakpointIds"])
        if type(body.get("threadId")) is int:
            with self.lock:
                worker.threads.add(body["threadId"])
        if name == "stopped":
            body["allThreadsStopped"] = False
            body["description"] = f"rank {worker.rank}: {body.get('description') or body.get('reason', '')}"
        elif name == "output" and isinstance(body.get("output"), str):
            body["output"] = _prefixed(f"[rank {worker.rank}] ", body["output"])
        self.event(name, body, conn)

    def _learn(self, worker: Worker, ids: tuple[int, ...], then: Any = None) -> Any:
        def answered(msg: dict[str, Any] | None) -> None:
            learn(worker.bp_ids, ids, msg)
            if then is not None:
                then(msg)
        return answered


def _prefixed(prefix: str, text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(prefix + line for line in lines) if lines else text
