"""The DAP server inside the debugged process: connections, dispatch, and holding a stopped thread.

Threads (each marked for debugpy as not-to-trace, `protocol.mark_service_thread`):

    accept    one per server: one client at a time; a second one is told why and closed
    reader    one per client: reads frames, answers session requests itself (requests.py) and
              hands stop requests (stackTrace, variables, evaluate, setVariable, continue, ...) to
              the stopped program thread
    writer    one per client: the only one writing to the socket (protocol.Connection)
    program   the debuggee: at a stop `hold(view)` sends `stopped`, then answers its inbox on the
              program thread (torch's thread-local state lives there) until a resume request

A malformed frame closes the connection; a malformed request gets an error response; neither
ever raises into the program or blocks it. When the client goes away mid-stop the program runs on.

    server = DapServer("127.0.0.1", 5679)          # a non-loopback host needs token=...
    command, args = server.hold(view, stopped)     # program thread: "continue", "next", ... or "terminate"
    server.program_exited(0)                       # exited + terminated, then close
"""

from __future__ import annotations

import queue
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..core.events import Warning_, emit
from ..step.graphs import GRAPHS
from .protocol import (ANSWERED, FRAME_TIMEOUT_S, BadRequest, Connection, DapError, notify,
                       parse_request, reply, start_thread)
from .requests import SessionRequests, require_token

SESSION_COMMANDS = frozenset({"initialize", "attach", "launch", "setBreakpoints", "setFunctionBreakpoints",
                              "setExceptionBreakpoints", "configurationDone", "threads", "pause", "source",
                              "loadedSources", "terminate", "disconnect"})
STOP_COMMANDS = frozenset({"stackTrace", "scopes", "variables", "evaluate", "setVariable", "setExpression",
                           "exceptionInfo", "disassemble", "continue", "next", "stepIn", "stepOut"})
RESUME = frozenset({"continue", "next", "stepIn", "stepOut"})


class Held:
    """A stopped program thread and the requests waiting for it."""

    def __init__(self, view: Any, thread_id: int) -> None:
        self.view, self.thread_id = view, thread_id
        self.inbox: queue.Queue[tuple[str, dict[str, Any], dict[str, Any]] | None] = queue.Queue()


class DapServer(SessionRequests):
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None,
                 frame_timeout: float = FRAME_TIMEOUT_S, on_terminate: Callable[[], None] | None = None) -> None:
        require_token(host, token)
        self.token, self.frame_timeout, self.on_terminate = token, frame_timeout, on_terminate
        self.listener = socket.create_server((host, port))
        self.host, self.port = self.listener.getsockname()[:2]
        self.lock = threading.RLock()
        self.conn: Connection | None = None
        self.held: Held | None = None
        self.disconnected = threading.Event()
        self.init_session()
        self.accept_thread = start_thread(self._accept_loop, "dynstep-dap-accept")

    # -- program side -----------------------------------------------------------------------------

    def attached(self) -> bool:
        return self.state == "configured" and self.conn is not None

    def hold(self, view: Any, stopped: dict[str, Any],
             idle: Callable[[], None] | None = None) -> tuple[str, dict[str, Any]]:
        """Send `stopped` and answer requests on this (the program's) thread until one resumes:
        (the resume request's command and arguments), ("continue", {}) when the client went away,
        ("terminate", {}) when it ended the program. `idle` runs every 50 ms while no request comes
        (a distributed job's rank answers the other ranks then)."""
        held = Held(view, stopped["threadId"])
        with self.lock:
            conn = self.conn
            if conn is None or not self.attached():
                return "continue", {}
            self.held = held
        self.event("stopped", stopped, conn)
        action: tuple[str, dict[str, Any]] = ("continue", {})
        untraced = _untrace_for_debugpy()
        try:
            while (item := _next(held.inbox, idle)) is not None:
                command, req, args = item
                if command in RESUME:
                    self.respond(conn, req, {"allThreadsContinued": False} if command == "continue" else None)
                    action = (command, args)
                    break
                self._answer(conn, req, lambda: getattr(view, "stop_" + command)(args))
        finally:
            self._release(conn, held, untraced)
        return ("terminate", {}) if self.terminating else action

    def _release(self, conn: Connection, held: Held, untraced: bool) -> None:
        with self.lock:
            self.held = None
            left = []
            while True:
                try:
                    left.append(held.inbox.get_nowait())
                except queue.Empty:
                    break
        for item in left:
            if item is not None:
                self.respond(conn, item[1], error="the program is running again")
        held.view.handles.clear()
        if untraced:
            sys.modules["debugpy"].trace_this_thread(True)

    def output(self, text: str, category: str = "console", **extra: Any) -> None:
        conn = self.conn
        if conn is not None and self.state in ("attached", "configured"):
            self.event("output", {"category": category, "output": text if text.endswith("\n") else text + "\n",
                                  **extra}, conn)

    def program_exited(self, exit_code: int, linger: float = 5.0) -> None:
        """The program is about to end: `exited` with its exit code, `terminated`, then close."""
        with self.lock:
            self.exited = True
            conn = self.conn if self.state in ("attached", "configured") else None
        if conn is not None:
            self.event("exited", {"exitCode": int(exit_code)}, conn)
            self.event("terminated", {}, conn)
            self.disconnected.wait(linger)
        self.close()

    def close(self) -> None:
        try:
            self.listener.close()
        except OSError:
            pass
        with self.lock:
            conn = self.conn
        if conn is not None:
            conn.flush_and_close(timeout=1.0)
            self._client_gone(conn)
        self.breakpoints.close()
        GRAPHS.unlisten(self._compiled_here)

    # -- server threads ----------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return                                    # the listener was closed
            with self.lock:
                busy = self.conn is not None
            if busy and self.disconnected.wait(2.0):
                busy = False                              # the last client was just leaving
            conn = Connection(sock, self.frame_timeout)
            if busy:
                self.event("output", {"category": "important", "output": "dynstep: another debug client is "
                                      "attached to this process; only one at a time\n"}, conn)
                conn.flush_and_close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conn = conn
                self.reset_session()
                self.disconnected.clear()
            start_thread(self._read_loop, "dynstep-dap-reader", conn)

    def _read_loop(self, conn: Connection) -> None:
        try:
            for body in conn.bodies(lambda exc: emit(Warning_(f"debug adapter: closing the client's connection: {exc}"))):
                self._dispatch(conn, body)
        finally:
            self._client_gone(conn)
            conn.close()

    def _client_gone(self, conn: Connection) -> None:
        """Forget the client: its breakpoints go, a thread it held runs on."""
        with self.lock:
            if self.conn is not conn:
                return
            self.conn = None
            self.reset_session()
            if self.held is not None:
                self.held.inbox.put(None)
            self.disconnected.set()

    def drop(self, conn: Connection) -> None:
        self._client_gone(conn)
        conn.flush_and_close()

    # -- dispatch (reader thread) -------------------------------------------------------------------

    def _dispatch(self, conn: Connection, body: bytes) -> None:
        try:
            req, command, args = parse_request(body)
        except BadRequest as exc:
            if exc.req is None:
                return self._unanswerable(conn, str(exc))
            return self.respond(conn, exc.req, error=str(exc))
        if command in SESSION_COMMANDS:
            self._answer(conn, req, lambda: self.session_request(conn, req, command, args))
            if command == "disconnect":
                self.drop(conn)
        elif command in STOP_COMMANDS:
            self._answer(conn, req, lambda: self._to_program(req, command, args))
        else:
            self.respond(conn, req, error=f"unsupported request {command!r}")

    def _to_program(self, req: dict[str, Any], command: str, args: dict[str, Any]) -> Any:
        self.check_order(command)
        with self.lock:
            held = self.held
            if held is None:
                raise DapError(f"{command}: the program is not stopped")
            tid = args.get("threadId", held.thread_id)
            if (command in RESUME or command == "stackTrace") and tid != held.thread_id:
                raise DapError(f"thread {tid!r} is not stopped (thread {held.thread_id} is)")
            held.inbox.put((command, req, args))
        return ANSWERED

    def _answer(self, conn: Connection, req: dict[str, Any], work: Callable[[], Any]) -> None:
        """Run a handler; its body, or any failure as an error response (never a dead thread)."""
        try:
            body = work()
        except DapError as exc:
            return self.respond(conn, req, error=str(exc))
        except Exception as exc:
            return self.respond(conn, req, error=f"{type(exc).__name__}: {exc}")
        if body is not ANSWERED:
            self.respond(conn, req, body)

    def _unanswerable(self, conn: Connection, why: str) -> None:
        self.event("output", {"category": "important", "output": f"dynstep: {why}; closing the connection\n"}, conn)
        emit(Warning_(f"debug adapter: the client sent {why}; closing its connection"))
        self.drop(conn)

    def respond(self, conn: Connection, req: dict[str, Any], body: Any = None, *, error: str | None = None) -> None:
        reply(conn, req, body, error=error)

    def event(self, name: str, body: dict[str, Any] | None = None, conn: Connection | None = None) -> None:
        conn = conn or self.conn
        if conn is not None and (problem := notify(conn, name, body)):
            emit(Warning_(f"debug adapter: dropped an event {name!r} that could not be encoded: {problem}"))


def _next(inbox: queue.Queue, idle: Callable[[], None] | None) -> Any:
    while True:
        try:
            return inbox.get(timeout=0.05) if idle is not None else inbox.get()
        except queue.Empty:
            idle()  # type: ignore[misc]


def _untrace_for_debugpy() -> bool:
    """While dynstep holds the program thread, debugpy must not suspend it inside dynstep's loop."""
    debugpy = sys.modules.get("debugpy")
    if debugpy is None or not hasattr(debugpy, "trace_this_thread"):
        return False
    try:
        debugpy.trace_this_thread(False)
    except Exception:   # debugpy imported but not listening: nothing to untrace
        return False
    return True
