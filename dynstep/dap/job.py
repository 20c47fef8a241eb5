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

    adapter = JobAdapter("127.0.0.1", 5679, workers=[("127.0.0.1", 5680), ("127.0.0.1", 5681)])
    ...                                   # torchrun runs the job
    adapter.job_ended(exit_code)
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from typing import Any

from ..core.events import Warning_, emit
from .jobids import JobIds, to_client
from .jobworkers import CONFIG, Worker, WorkerSide
from .protocol import BadRequest, Connection, ProtocolError, notify, parse_request, refuse, reply, start_thread
from .requests import CAPABILITIES, require_token, token_matches

ATTACH_WAIT_S = 1.0         # how long `attach` lets running workers connect first (later ones join anyway)
TERMINATE_WAIT_S = 10.0     # how long a `disconnect` that ends the job waits for its end (exited, terminated)


class JobAdapter(WorkerSide):
    def __init__(self, host: str, port: int, workers: list[tuple[str, int]], *, token: str | None = None) -> None:
        require_token(host, token)
        self.token = token
        self.workers = [Worker(i, a) for i, a in enumerate(workers)]
        self.ids = JobIds(len(workers))
        self.listener = socket.create_server((host, port))
        self.host, self.port = self.listener.getsockname()[:2]
        self.lock = threading.RLock()
        self.conn: Connection | None = None
        self.history: list[tuple[str, dict[str, Any], tuple[int, ...]]] = []   # (command, args, the client's bp ids)
        self.next_bp = itertools.count(1)
        self.state = "none"
        self.client_paging = False
        self.goodbye: dict[str, Any] = {}
        self.ended = threading.Event()
        self.left = threading.Event()            # set when a client has gone
        start_thread(self._accept_loop, "dynstep-job-accept")

    # -- the client ----------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            conn = Connection(sock)
            if self.conn is not None:
                self.left.wait(2.0)                       # the last client may be just leaving
            with self.lock:
                busy = self.conn is not None
                if not busy:
                    self.conn, self.state, self.history, self.goodbye = conn, "none", [], {}
                    self.next_bp = itertools.count(1)
                    self.left.clear()
            if busy:
                self._event(conn, "output", {"category": "important", "output": "dynstep: another debug client is "
                                             "attached to this job; only one at a time\n"})
                conn.flush_and_close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            start_thread(self._read_loop, "dynstep-job-reader", conn)

    def _read_loop(self, conn: Connection) -> None:
        try:
            for body in conn.bodies(lambda exc: _broken(conn, exc)):
                try:
                    req, command, args = parse_request(body)
                except BadRequest as exc:
                    if exc.fatal:
                        refuse(conn, exc.req, str(exc), "dynstep job")
                        break
                    self._respond(conn, exc.req, error=str(exc))
                    continue
                try:
                    self._dispatch(conn, req, command, args)
                except Exception as exc:   # never a dead reader: the client gets the failure
                    self._respond(conn, req, error=f"{type(exc).__name__}: {exc}")
                if command == "disconnect":
                    self._wait_for_the_end(conn)
                    break
        finally:
            self._client_gone(conn)

    def _dispatch(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any]) -> None:
        if command == "initialize":
            if self.state != "none":
                return self._respond(conn, req, error="initialize was already received")
            self.state = "initialized"
            self.client_paging = args.get("supportsVariablePaging") is True   # told to every rank's server
            return self._respond(conn, req, CAPABILITIES)
        if command == "launch":
            return self._respond(conn, req, error="dynstep runs inside your program: use an attach configuration")
        if command == "attach":
            return self._attach(conn, req, args)
        if command == "disconnect":
            if self.state != "attached":    # a client that never attached ends nothing
                return self._respond(conn, req, error="disconnect: this client has not attached; nothing was done "
                                     "(the job runs on)")
            self.goodbye = args          # _client_gone passes it on (terminateDebuggee ends every rank)
            return self._respond(conn, req)
        if self.state != "attached":
            return self._respond(conn, req, error="initialize and attach first")
        if command in CONFIG:
            return self._configure(conn, req, command, args)
        if command == "configurationDone":
            with self.lock:
                self.history.append((command, args, ()))
                self._broadcast(command, args)
            return self._respond(conn, req)
        if command == "threads":
            return self._threads(conn, req)
        if command == "terminate":
            self._broadcast(command, args)
            return self._respond(conn, req)
        i = self.ids.route(args)
        if command == "pause" and not any(args.get("threadId") in w.threads for w in self.workers):
            self._broadcast(command, args)          # a thread this adapter never named: pause every rank
            return self._respond(conn, req)
        self._forward(conn, req, command, args, self._lead() if i is None else i)

    def _attach(self, conn: Connection, req: dict[str, Any], args: dict[str, Any]) -> None:
        if self.state != "initialized":
            return self._respond(conn, req, error="initialize first" if self.state == "none" else "attach was already received")
        if not token_matches(args.get("token"), self.token):
            self._respond(conn, req, error="attach refused: this dynstep job needs its token (the \"token\" attribute "
                          "of the attach configuration, printed when the job started)")
            return conn.flush_and_close()
        self.state = "attached"
        for worker in self.workers:
            start_thread(self._connect_loop, f"dynstep-job-rank{worker.index}", worker, conn)
        start_thread(self._attached, "dynstep-job-attach", conn, req)   # the reader goes on reading

    def _attached(self, conn: Connection, req: dict[str, Any]) -> None:
        """Answer `attach` once every rank is connected or ATTACH_WAIT_S passed (ranks that start later
        join with the whole session), unless the client left."""
        deadline = time.monotonic() + ATTACH_WAIT_S
        while time.monotonic() < deadline and not self.ended.is_set() and not all(w.link for w in self.workers):
            if self.conn is not conn:
                return
            time.sleep(0.05)
        self._respond(conn, req)
        self._event(conn, "initialized")
        self._event(conn, "process", {"name": f"torchrun job ({len(self.workers)} local rank(s))", "isLocalProcess": True,
                                      "startMethod": "attach"})
        missing = [f"local rank {w.index} ({w.address[0]}:{w.address[1]})" for w in self.workers if w.link is None]
        if missing and not self.ended.is_set():
            self._output(conn, f"dynstep: not yet connected to {', '.join(missing)}: they join when they start")

    def _configure(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any]) -> None:
        wanted = args.get("breakpoints") if isinstance(args.get("breakpoints"), list) else []
        ids = tuple(next(self.next_bp) for _ in wanted) if command != "setExceptionBreakpoints" else ()
        with self.lock:
            self.history.append((command, args, ids))
            lead = self._lead()
            for worker in self.workers:
                if worker.link is not None and worker.index != lead:
                    self._send(worker, command, self.ids.down(args), self._learn(worker, ids))
        if lead is not None:
            return self._forward(conn, req, command, args, lead, ids)
        if command == "setExceptionBreakpoints":   # what every worker will answer
            return self._respond(conn, req, {"breakpoints": [{"verified": f == "nan"} for f in args.get("filters", [])
                                                             if isinstance(f, str)]})
        self._respond(conn, req, {"breakpoints": [{"id": i, "verified": False, "message": "no rank has connected yet"}
                                                  for i in ids]})

    def _threads(self, conn: Connection, req: dict[str, Any]) -> None:
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
        self._respond(conn, req, {"threads": threads})

    def _forward(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any], i: int | None,
                 bp_ids: tuple[int, ...] = ()) -> None:
        worker = self.workers[i] if i is not None and i < len(self.workers) else None
        if worker is None or worker.link is None:
            which = f"rank {worker.rank} is not" if worker is not None else "no rank is"
            return self._respond(conn, req, error=f"{command}: {which} connected to this job's debug adapter yet")

        def answered(msg: dict[str, Any] | None) -> None:
            if msg is None:
                self._respond(conn, req, error=f"{command}: rank {worker.rank}'s connection closed")
            elif not msg.get("success"):
                self._respond(conn, req, error=f"rank {worker.rank}: {msg.get('message') or command + ' failed'}")
            else:
                body = self.ids.up(worker.index, msg.get("body"), command)
                if command in CONFIG and isinstance(body, dict) and isinstance(body.get("breakpoints"), list):
                    body["breakpoints"] = [to_client(worker.bp_ids, bp) for bp in body["breakpoints"]]
                self._respond(conn, req, body)

        self._send(worker, command, self.ids.down(args), self._learn(worker, bp_ids, answered) if command in CONFIG
                   else answered)

    # -- the end -------------------------------------------------------------------------------------

    def _wait_for_the_end(self, conn: Connection) -> None:
        """A `disconnect` with terminateDebuggee: every rank is terminated, and the client hears the job's
        `exited` and `terminated` (job_ended) before its connection closes; bounded."""
        if self.state != "attached" or self.goodbye.get("terminateDebuggee") is not True or self.ended.is_set():
            return
        self._broadcast("terminate", {})
        if not self.ended.wait(TERMINATE_WAIT_S):
            self._output(conn, f"dynstep: the job has not ended {TERMINATE_WAIT_S:.0f} s after the client terminated it")
            self._event(conn, "terminated", {})

    def _client_gone(self, conn: Connection) -> None:
        with self.lock:
            if self.conn is not conn:
                return
            self.conn, self.state = None, "none"
            self.left.set()
            links = [w.link for w in self.workers if w.link is not None]
            goodbye = {k: v for k, v in self.goodbye.items() if k in ("terminateDebuggee", "restart")}
        for link in links:      # each worker forgets the client (its breakpoints) and runs on
            try:
                link.send("disconnect", goodbye, on_response=lambda msg: None)
            except OSError:
                pass
        time.sleep(0.1)
        for link in links:
            link.close()
        conn.flush_and_close()

    def job_ended(self, exit_code: int, linger: float = 5.0) -> None:
        """The launcher's job is over: `exited` with its code, `terminated`, then close."""
        self.ended.set()
        conn = self.conn
        if conn is not None and self.state == "attached":
            self._event(conn, "exited", {"exitCode": int(exit_code)})
            self._event(conn, "terminated", {})
            deadline = time.monotonic() + linger
            while self.conn is conn and time.monotonic() < deadline:
                time.sleep(0.05)
        self.close()

    def close(self) -> None:
        self.ended.set()
        try:
            self.listener.close()
        except OSError:
            pass
        conn = self.conn
        if conn is not None:
            self._client_gone(conn)

    # -- messages --------------------------------------------------------------------------------------

    def _respond(self, conn: Connection, req: dict[str, Any], body: Any = None, *, error: str | None = None) -> None:
        reply(conn, req, body, error=error)

    def _event(self, conn: Connection, name: str, body: dict[str, Any] | None = None) -> None:
        if problem := notify(conn, name, body):
            emit(Warning_(f"job debug adapter: dropped an event {name!r} that could not be encoded: {problem}"))

    def _output(self, conn: Connection, text: str) -> None:
        self._event(conn, "output", {"category": "console", "output": text + "\n"})


def _broken(conn: Connection, exc: Exception) -> None:
    emit(Warning_(f"job debug adapter: closing the client's connection: {exc}"))
    if isinstance(exc, ProtocolError):
        refuse(conn, {"seq": 0, "command": ""}, f"a frame that cannot be read ({exc})", "dynstep job")

