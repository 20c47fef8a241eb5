"""One debug adapter for the ranks of a torchrun node: each rank's program thread is a DAP thread.

    dynstep run --dap 5679 --ranks all --pause "module:layers.1" -m torch.distributed.run --nproc-per-node 2 train.py
    # VS Code (or `dynstep attach 127.0.0.1:5679`) attaches to 5679 and sees "rank 0 · MainThread",
    # "rank 1 · MainThread": each rank stops, steps and is inspected on its own thread.

The launcher serves this adapter on PORT; the worker with local rank i serves its own DAP server
(server.py) on PORT + 1 + i. The adapter is a proxy: when a client attaches it connects to every
worker (and to a worker that starts later or restarts), replays the client's session to it
(initialize, attach with the token, every breakpoint request so far, configurationDone) and from
then on routes each request to the rank it concerns and each event back.

Numbers a worker hands out (threadId, frameId, variablesReference, sourceReference) are unique
here as ``number * N + i`` (N workers): a request carrying one goes to worker ``number % N`` with
``number // N``. Memory references are prefixed ``i:``. Breakpoint requests go to every worker;
the adapter numbers the client's breakpoints itself and maps each worker's ids to them by
position (in the answers, `breakpoint` events and `hitBreakpointIds`); the lowest connected
worker's answer is the client's, and only its `breakpoint` events are passed on. A request that
names no rank (an `evaluate` without a frame: a hover while running) goes to that worker too. Output lines
are prefixed ``[rank R]``; a worker's `exited` becomes a line of output and `thread` exits; the
adapter's own `exited`/`terminated` come when the launcher says the job ended (`job_ended`).

It is an `Endpoint` (endpoint.py) like the process's server: the same accept and reader threads,
session order, token check, one client at a time, message bounds and `disconnect`/`terminate`
handling; what it adds is the routing.

    adapter = JobAdapter("127.0.0.1", 5679, workers=[("127.0.0.1", 5680), ("127.0.0.1", 5681)])
    ...                                   # torchrun runs the job
    adapter.job_ended(exit_code)
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from .endpoint import Endpoint
from .jobids import JobIds, to_client
from .jobworkers import CONFIG, Worker, WorkerSide
from .protocol import ANSWERED, Connection, start_thread

ATTACH_WAIT_S = 1.0         # how long `attach` lets running workers connect first (later ones join anyway)


class JobAdapter(WorkerSide, Endpoint):
    WHO, SERVES, PLACE, PROGRAM, WARNS, THREADS = "dynstep job", "job", "job", "job", "job debug adapter", "dynstep-job"

    def __init__(self, host: str, port: int, workers: list[tuple[str, int]], *, token: str | None = None) -> None:
        super().__init__(host, port, token=token)
        self.workers = [Worker(i, a) for i, a in enumerate(workers)]
        self.ids = JobIds(len(workers))
        self.new_session()
        self.serve()

    def new_session(self) -> None:
        """The endpoint's hook (under its lock): the client's requests so far and its breakpoint numbers."""
        self.history: list[tuple[str, dict[str, Any], tuple[int, ...]]] = []   # (command, args, the client's bp ids)
        self.next_bp = itertools.count(1)

    # -- the client's requests (reader thread) -----------------------------------------------------------

    def request(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any]) -> Any:
        if command in CONFIG:
            return self._configure(conn, req, command, args)
        if command == "configurationDone":
            with self.lock:
                self.session.configure()
                self.history.append((command, args, ()))
                self._broadcast(command, args)
            return None
        if command == "threads":
            return self._threads()
        if command == "terminate":
            self._broadcast(command, args)
            return None
        i = self.ids.route(args)
        if command == "pause" and not any(args.get("threadId") in w.threads for w in self.workers):
            self._broadcast(command, args)          # a thread this adapter never named: pause every rank
            return None
        self._forward(conn, req, command, args, self._lead() if i is None else i)
        return ANSWERED

    def on_attach(self, conn: Connection, req: dict[str, Any]) -> Any:
        for worker in self.workers:
            start_thread(self._connect_loop, f"dynstep-job-rank{worker.index}", worker, conn)
        start_thread(self._attached, "dynstep-job-attach", conn, req)   # the reader goes on reading
        return ANSWERED

    def _attached(self, conn: Connection, req: dict[str, Any]) -> None:
        """Answer `attach` once every rank is connected or ATTACH_WAIT_S passed (ranks that start later
        join with the whole session), unless the client left."""
        deadline = time.monotonic() + ATTACH_WAIT_S
        while time.monotonic() < deadline and not self.ended.is_set() and not all(w.link for w in self.workers):
            if self.conn is not conn:
                return
            time.sleep(0.05)
        self.respond(conn, req)
        self.event("initialized", None, conn)
        self.event("process", {"name": f"torchrun job ({len(self.workers)} local rank(s))", "isLocalProcess": True,
                               "startMethod": "attach"}, conn)
        missing = [f"local rank {w.index} ({w.address[0]}:{w.address[1]})" for w in self.workers if w.link is None]
        if missing and not self.ended.is_set():
            self._output(conn, f"dynstep: not yet connected to {', '.join(missing)}: they join when they start")

    def _configure(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any]) -> Any:
        wanted = args.get("breakpoints") if isinstance(args.get("breakpoints"), list) else []
        ids = tuple(next(self.next_bp) for _ in wanted) if command != "setExceptionBreakpoints" else ()
        with self.lock:
            self.history.append((command, args, ids))
            lead = self._lead()
            for worker in self.workers:
                if worker.link is not None and worker.index != lead:
                    self._send(worker, command, self.ids.down(args), self._learn(worker, ids))
        if lead is not None:
            self._forward(conn, req, command, args, lead, ids)
            return ANSWERED
        if command == "setExceptionBreakpoints":   # what every worker will answer
            return {"breakpoints": [{"verified": f == "nan"} for f in args.get("filters", []) if isinstance(f, str)]}
        return {"breakpoints": [{"id": i, "verified": False, "message": "no rank has connected yet"} for i in ids]}

    def _threads(self) -> dict[str, Any]:
        live = [w for w in self.workers if w.link is not None]
        answers: dict[int, Any] = {}
        done = threading.Event()

        def collect(worker: Worker, msg: dict[str, Any] | None) -> None:
            answers[worker.index] = msg
            if len(answers) == len(live):
                done.set()

        for worker in live:
            self._send(worker, "threads", {}, lambda msg, w=worker: collect(w, msg))
        if live:
            done.wait(5.0)
        threads = []
        for worker in live:
            msg = answers.get(worker.index)
            for thread in ((msg or {}).get("body") or {}).get("threads", []) if msg and msg.get("success") else []:
                tid = self.ids.one(worker.index, thread["id"])
                with self.lock:
                    worker.threads.add(tid)
                threads.append({"id": tid, "name": f"rank {worker.rank} · {thread.get('name', '')}"})
        return {"threads": threads}

    def _forward(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any], i: int | None,
                 bp_ids: tuple[int, ...] = ()) -> None:
        worker = self.workers[i] if i is not None and i < len(self.workers) else None
        if worker is None or worker.link is None:
            which = f"rank {worker.rank} is not" if worker is not None else "no rank is"
            return self.respond(conn, req, error=f"{command}: {which} connected to this job's debug adapter yet")

        def answered(msg: dict[str, Any] | None) -> None:
            if msg is None:
                self.respond(conn, req, error=f"{command}: rank {worker.rank}'s connection closed")
            elif not msg.get("success"):
                self.respond(conn, req, error=f"rank {worker.rank}: {msg.get('message') or command + ' failed'}")
            else:
                body = self.ids.up(worker.index, msg.get("body"), command)
                if command in CONFIG and isinstance(body, dict) and isinstance(body.get("breakpoints"), list):
                    body["breakpoints"] = [to_client(worker.bp_ids, bp) for bp in body["breakpoints"]]
                self.respond(conn, req, body)

        self._send(worker, command, self.ids.down(args), self._learn(worker, bp_ids, answered) if command in CONFIG
                   else answered)

    # -- the end -------------------------------------------------------------------------------------

    def terminate(self) -> None:
        """The endpoint's hook (a `disconnect` with terminateDebuggee): every rank is terminated; the
        endpoint waits for the job's end (job_ended), bounded."""
        if self.ended.is_set():
            return
        self.terminating = True
        self._broadcast("terminate", {})

    def _client_gone(self, conn: Connection) -> bool:
        with self.lock:
            links = [w.link for w in self.workers if w.link is not None]
            goodbye = {k: v for k, v in self.session.goodbye.items() if k in ("terminateDebuggee", "restart")}
            if not super()._client_gone(conn):
                return False
        for link in links:      # each worker forgets the client (its breakpoints) and runs on
            try:
                link.send("disconnect", goodbye, on_response=lambda msg: None)
            except OSError:
                pass
        time.sleep(0.1)
        for link in links:
            link.close()
        conn.flush_and_close()
        return True

    def job_ended(self, exit_code: int, linger: float = 5.0) -> None:
        """The launcher's job is over: `exited` with its code, `terminated`, then close."""
        self.ended.set()
        conn = self.conn
        if conn is not None and self.session.attached:
            self.event("exited", {"exitCode": int(exit_code)}, conn)
            self.event("terminated", {}, conn)
            deadline = time.monotonic() + linger
            while self.conn is conn and time.monotonic() < deadline:
                time.sleep(0.05)
        self.close()

    def close(self) -> None:
        self.ended.set()
        super().close()

    def _output(self, conn: Connection, text: str) -> None:
        self.event("output", {"category": "console", "output": text + "\n"}, conn)
