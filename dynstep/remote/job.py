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
the lowest connected worker answers them (every worker saw the same requests in the same order,
so breakpoint ids agree) and only its `breakpoint` events are passed on. A request that names no
rank (an `evaluate` without a frame: a hover while running) goes to that worker too. Output lines
are prefixed ``[rank R]``; a worker's `exited` becomes a line of output and `thread` exits; the
adapter's own `exited`/`terminated` come when the launcher says the job ended (`job_ended`).

    adapter = JobAdapter("127.0.0.1", 5679, workers=[("127.0.0.1", 5680), ("127.0.0.1", 5681)])
    ...                                   # torchrun runs the job
    adapter.job_ended(exit_code)
"""

from __future__ import annotations

import hmac
import socket
import threading
import time
from typing import Any

from ..core.events import Warning_, emit
from .client import ClientError, DapClient
from .jobids import JobIds
from .protocol import BadRequest, Connection, notify, parse_request, reply, start_thread
from .requests import CAPABILITIES, is_loopback

CONFIG = frozenset({"setBreakpoints", "setFunctionBreakpoints", "setExceptionBreakpoints"})
ATTACH_WAIT_S = 30.0        # how long `attach` waits for the workers' servers to come up


class Worker:
    """One rank's DAP server, as the adapter sees it."""

    def __init__(self, index: int, address: tuple[str, int]) -> None:
        self.index, self.address = index, address
        self.rank = index                      # the job's rank, once the worker's `process` event says it
        self.link: DapClient | None = None     # live: attached and replayed
        self.threads: set[int] = set()         # this adapter's ids of the worker's threads
        self.exit_code: int | None = None


class JobAdapter:
    def __init__(self, host: str, port: int, workers: list[tuple[str, int]], *, token: str | None = None) -> None:
        if not is_loopback(host) and not token:
            raise ValueError(f"dynstep: serving the debug adapter protocol on {host!r} (not a loopback address) "
                             "needs a token (--dap-token, or let `dynstep run` generate one)")
        self.token = token
        self.workers = [Worker(i, a) for i, a in enumerate(workers)]
        self.ids = JobIds(len(workers))
        self.listener = socket.create_server((host, port))
        self.host, self.port = self.listener.getsockname()[:2]
        self.lock = threading.RLock()
        self.conn: Connection | None = None
        self.history: list[tuple[str, dict[str, Any]]] = []
        self.state = "none"
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
            for body in conn.bodies(lambda exc: emit(Warning_(f"job debug adapter: closing the client's connection: "
                                                              f"{exc}"))):
                try:
                    req, command, args = parse_request(body)
                except BadRequest as exc:
                    if exc.req is None:
                        self._event(conn, "output", {"category": "important", "output": f"dynstep: {exc}\n"})
                        break
                    self._respond(conn, exc.req, error=str(exc))
                    continue
                try:
                    self._dispatch(conn, req, command, args)
                except Exception as exc:   # never a dead reader: the client gets the failure
                    self._respond(conn, req, error=f"{type(exc).__name__}: {exc}")
                if command == "disconnect":
                    break
        finally:
            self._client_gone(conn)

    def _dispatch(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any]) -> None:
        if command == "initialize":
            if self.state != "none":
                return self._respond(conn, req, error="initialize was already received")
            self.state = "initialized"
            return self._respond(conn, req, CAPABILITIES)
        if command == "launch":
            return self._respond(conn, req, error="dynstep runs inside your program: use an attach configuration")
        if command == "attach":
            return self._attach(conn, req, args)
        if command == "disconnect":
            self.goodbye = args          # _client_gone passes it on (terminateDebuggee ends every rank)
            return self._respond(conn, req)
        if self.state != "attached":
            return self._respond(conn, req, error="initialize and attach first")
        if command in CONFIG:
            return self._configure(conn, req, command, args)
        if command == "configurationDone":
            with self.lock:
                self.history.append((command, args))
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

    def _check_token(self, args: dict[str, Any]) -> bool:
        given = args.get("token")
        return self.token is None or (isinstance(given, str) and
                                      hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode()))

    def _attach(self, conn: Connection, req: dict[str, Any], args: dict[str, Any]) -> None:
        if self.state != "initialized":
            return self._respond(conn, req, error="initialize first" if self.state == "none" else "attach was already received")
        if not self._check_token(args):
            self._respond(conn, req, error="attach refused: this dynstep job needs its token (the \"token\" attribute "
                          "of the attach configuration, printed when the job started)")
            return conn.flush_and_close()
        self.state = "attached"
        for worker in self.workers:
            start_thread(self._connect_loop, f"dynstep-job-rank{worker.index}", worker, conn)
        start_thread(self._attached, "dynstep-job-attach", conn, req)   # the reader goes on reading

    def _attached(self, conn: Connection, req: dict[str, Any]) -> None:
        """Answer `attach` once every rank is connected (or ATTACH_WAIT_S passed, or the client left)."""
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
        with self.lock:
            self.history.append((command, args))
            lead = self._lead()
            for worker in self.workers:
                if worker.link is not None and worker.index != lead:
                    self._send(worker, command, self.ids.down(args), None)
        if lead is not None:
            return self._forward(conn, req, command, args, lead)
        if command == "setExceptionBreakpoints":   # what every worker will answer
            return self._respond(conn, req, {"breakpoints": [{"verified": f == "nan"} for f in args.get("filters", [])
                                                             if isinstance(f, str)]})
        wanted = args.get("breakpoints") if isinstance(args.get("breakpoints"), list) else []
        self._respond(conn, req, {"breakpoints": [{"verified": False, "message": "no rank has started yet"}
                                                  for _ in wanted]})

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
                worker.threads.add(tid)
                threads.append({"id": tid, "name": f"rank {worker.rank} · {thread.get('name', '')}"})
        self._respond(conn, req, {"threads": threads})

    def _forward(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any], i: int | None) -> None:
        worker = self.workers[i] if i is not None and i < len(self.workers) else None
        if worker is None or worker.link is None:
            which = f"rank {worker.rank} is" if worker is not None else "no rank is yet"
            return self._respond(conn, req, error=f"{command}: {which} connected to this job's debug adapter")

        def answered(msg: dict[str, Any] | None) -> None:
            if msg is None:
                self._respond(conn, req, error=f"{command}: rank {worker.rank}'s connection closed")
            elif not msg.get("success"):
                self._respond(conn, req, error=f"rank {worker.rank}: {msg.get('message') or command + ' failed'}")
            else:
                self._respond(conn, req, self.ids.up(worker.index, msg.get("body"), command))

        self._send(worker, command, self.ids.down(args), answered)

    # -- the workers ---------------------------------------------------------------------------------

    def _lead(self) -> int | None:
        return next((w.index for w in self.workers if w.link is not None), None)

    def _send(self, worker: Worker, command: str, args: dict[str, Any], on_response: Any) -> None:
        link = worker.link
        if link is None:
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
                link = DapClient(*worker.address, timeout=10.0, queue_events=False,
                                 on_message=lambda msg, w=worker: self._from_worker(w, msg))
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
            with self.lock:
                if self.conn is not conn:
                    link.close()
                    return
                for command, args in self.history:      # the session so far, in its order
                    link.send(command, self.ids.down(args), on_response=lambda msg: None)
                worker.link, worker.exit_code = link, None
            link.closed.wait()
            self._worker_gone(worker, conn)
            if worker.exit_code == 0:
                return                 # the rank is done; after a failure torchrun may start it again

    def _handshake(self, link: DapClient) -> str | None:
        """initialize and attach: None when attached, "" when the server did not answer, else why it refused."""
        for command, args in (("initialize", {"adapterID": "dynstep", "clientID": "dynstep-job", "linesStartAt1": True,
                                              "columnsStartAt1": True, "pathFormat": "path"}),
                              ("attach", {"token": self.token} if self.token else {})):
            try:
                msg = link.response(command, args)
            except (ClientError, OSError):
                return ""
            if not msg.get("success"):
                return str(msg.get("message") or f"{command} failed")
        return None

    def _worker_gone(self, worker: Worker, conn: Connection) -> None:
        with self.lock:
            worker.link = None
            threads, worker.threads = sorted(worker.threads), set()
        for tid in threads:
            self._event(conn, "thread", {"reason": "exited", "threadId": tid})
        if worker.exit_code is None and self.conn is conn and not self.ended.is_set():
            self._output(conn, f"dynstep: rank {worker.rank}'s debug adapter closed its connection")

    def _from_worker(self, worker: Worker, msg: dict[str, Any]) -> None:
        """An event from a worker (its reader thread), passed on as the client should see it."""
        conn = self.conn
        if conn is None or msg.get("type") != "event":
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
        if type(body.get("threadId")) is int:
            worker.threads.add(body["threadId"])
        if name == "stopped":
            body["allThreadsStopped"] = False
            body["description"] = f"rank {worker.rank}: {body.get('description') or body.get('reason', '')}"
        elif name == "output" and isinstance(body.get("output"), str):
            body["output"] = _prefixed(f"[rank {worker.rank}] ", body["output"])
        self._event(conn, name, body)

    # -- the end -------------------------------------------------------------------------------------

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


def _prefixed(prefix: str, text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(prefix + line for line in lines) if lines else text
