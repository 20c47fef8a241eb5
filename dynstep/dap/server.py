"""The DAP server inside the debugged process: dispatch, and holding a stopped program thread.

It is an `Endpoint` (endpoint.py: the accept and reader threads, the session's order, the token,
one client at a time) that answers the session requests itself (requests.py) and hands stop requests
(stackTrace, variables, evaluate, setVariable, continue, ...) to the stopped program thread:

    program   the debuggee: at a stop `hold(view)` sends `stopped`, then answers its inbox on the
              program thread (torch's thread-local state lives there) until a resume request

Before a successful `attach` only `initialize` is served: every other request gets an error
response (a `disconnect` also closes the connection; nothing reaches the program). A malformed
frame is answered with an error response and closes the connection; a malformed request gets an
error response; neither ever raises into the program or blocks it. When the client goes away
mid-stop the program runs on. Each resume is followed by a `continued` event; an expression that
ends the program (`exit(3)`, KeyboardInterrupt) is answered, then the program ends and the client
gets `exited` (under `dynstep run`) and `terminated`; so does a `disconnect` that terminates it.

    server = DapServer("127.0.0.1", 5679)          # a non-loopback host needs token=...
    command, args = server.hold(view, stopped)     # program thread: "continue", "next", ... or "terminate"
    server.program_exited(0)                       # exited + terminated, then close
"""

from __future__ import annotations

import queue
import sys
from collections.abc import Callable
from typing import Any

from ..core.command_table import RESUME_REQUESTS
from ..step.graphs import GRAPHS
from .endpoint import Endpoint
from .protocol import ANSWERED, FRAME_TIMEOUT_S, Connection, DapError
from .requests import HANDLERS, SessionRequests, process_body

STOP_COMMANDS = frozenset({"stackTrace", "scopes", "variables", "evaluate", "setVariable", "setExpression",
                           "exceptionInfo", "disassemble", "continue", "next", "stepIn", "stepOut"})
RESUME = RESUME_REQUESTS   # from the command tables: the requests that resume at some kind of stop


class Held:
    """A stopped program thread and the requests waiting for it."""

    def __init__(self, view: Any, thread_id: int) -> None:
        self.view, self.thread_id = view, thread_id
        self.inbox: queue.Queue[tuple[str, dict[str, Any], dict[str, Any]] | None] = queue.Queue()


class DapServer(SessionRequests, Endpoint):
    COMMANDS = frozenset({"initialize", "attach", "launch", "disconnect", *HANDLERS}) | STOP_COMMANDS

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None,
                 frame_timeout: float = FRAME_TIMEOUT_S, on_terminate: Callable[[], None] | None = None) -> None:
        super().__init__(host, port, token=token, frame_timeout=frame_timeout)
        self.on_terminate = on_terminate
        self.held: Held | None = None
        self.init_session()
        self.serve()

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
        view.paging = self.session.client_paging
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
                self._answer_here(conn, req, lambda: getattr(view, "stop_" + command)(args))
        finally:
            self._release(conn, held, untraced)
        if self.terminating:
            return "terminate", {}
        self.event("continued", {"threadId": held.thread_id, "allThreadsContinued": False}, conn)
        return action

    def _answer_here(self, conn: Connection, req: dict[str, Any], work: Callable[[], Any]) -> None:
        """`answer` on the program thread: an expression that ends the program (exit(), a
        KeyboardInterrupt) is answered first, then ends it (the client gets `exited` and `terminated`)."""
        try:
            self.answer(conn, req, work)
        except (SystemExit, KeyboardInterrupt) as exc:
            code = exc.code if isinstance(exc, SystemExit) else None
            what = f"exit({code!r})" if isinstance(exc, SystemExit) else "KeyboardInterrupt"
            self.respond(conn, req, error=f"{type(exc).__name__}: the expression raised {what}; the program is ending")
            raise

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
        if conn is not None and self.session.attached:
            self.event("output", {"category": category, "output": text if text.endswith("\n") else text + "\n",
                                  **extra}, conn)

    def program_exited(self, exit_code: int | None, linger: float = 5.0) -> None:
        """The program is about to end: `exited` with its exit code (when known), `terminated`, then close."""
        with self.lock:
            self.exited = True
            conn = self.conn if self.session.attached else None
        if conn is not None:
            if exit_code is not None:
                self.event("exited", {"exitCode": int(exit_code)}, conn)
            self.event("terminated", {}, conn)
        self.ended.set()
        if conn is not None and not self.session.leaving:    # a client that asked to disconnect is not waited for
            self.disconnected.wait(linger)
        self.close()

    def close(self) -> None:
        super().close()
        self.breakpoints.close()
        GRAPHS.unlisten(self._compiled_here)

    # -- the endpoint's hooks (reader thread) -------------------------------------------------------

    def on_attach(self, conn: Connection, req: dict[str, Any]) -> Any:
        self.respond(conn, req)
        self.event("initialized", None, conn)
        self.event("process", process_body(), conn)
        return ANSWERED

    def request(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any]) -> Any:
        if command in STOP_COMMANDS:
            return self._to_program(req, command, args)
        return HANDLERS[command](self, conn, req, args)

    def _client_gone(self, conn: Connection) -> bool:
        """Forget the client: its breakpoints go (new_session), a thread it held runs on."""
        with self.lock:
            gone = super()._client_gone(conn)
            if gone and self.held is not None:
                self.held.inbox.put(None)
        return gone

    def _to_program(self, req: dict[str, Any], command: str, args: dict[str, Any]) -> Any:
        with self.lock:
            held = self.held
            if held is None:
                raise DapError(f"{command}: the program is not stopped")
            tid = args.get("threadId", held.thread_id)
            if (command in RESUME or command == "stackTrace") and tid != held.thread_id:
                raise DapError(f"thread {tid!r} is not stopped (thread {held.thread_id} is)")
            held.inbox.put((command, req, args))
        return ANSWERED


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
