"""A TCP port serving one DAP client at a time: what every dynstep debug adapter does the same way.

The process's server (server.py) and the job's adapter (job.py) are both an `Endpoint`; each adds
the requests it answers its own way (`request`), what an accepted `attach` starts (`on_attach`),
how the program ends (`terminate`) and what it forgets when a client goes (`new_session`).

Threads (each marked for debugpy as not-to-trace, `protocol.mark_service_thread`):

    accept    one per endpoint: one client at a time; a client that comes while another is attached
              waits up to LEAVE_WAIT_S for it to leave, else is told why and closed
    reader    one per client: frames (protocol.Connection: framing, message bounds, a frame stalled
              mid-way drops the client); a message that is not DAP is answered and closes the
              connection, a malformed request gets an error response; the session's order, the token,
              initialize, launch, attach and disconnect are answered here (session.ClientSession);
              every other request goes to `request`; no failure ever kills the thread
    writer    one per client (protocol.Connection)

After an accepted `disconnect` with terminateDebuggee the program (job) is ended, and waited for,
bounded by TERMINATE_WAIT_S, so the client hears `exited` and `terminated` before its connection
closes; the client is then dropped (a stopped thread runs on).

    class DapServer(Endpoint): ...
    server = DapServer("127.0.0.1", 5679)       # a non-loopback host needs token=...
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from ..core.events import Warning_, emit
from .protocol import (ANSWERED, FRAME_TIMEOUT_S, BadRequest, Connection, DapError, ProtocolError, notify,
                       parse_request, refuse, reply, start_thread)
from .session import CAPABILITIES, LAUNCH_REFUSED, ClientSession, require_token

LEAVE_WAIT_S = 2.0          # how long a new client waits for the last one to finish leaving
TERMINATE_WAIT_S = 10.0     # how long a `disconnect` that ended the program waits for it to end


class Endpoint:
    # how this endpoint names itself in what it tells a client and the user
    WHO = "dynstep"                     # who speaks in a refusal's output line
    SERVES = "server"                   # "this dynstep server needs its token"
    PLACE = "process"                   # "another debug client is attached to this process"
    PROGRAM = "program"                 # "the program runs on", "the program has not ended"
    WARNS = "debug adapter"             # the user's warnings start with it
    THREADS = "dynstep-dap"             # its threads' names start with it
    COMMANDS: frozenset[str] | None = None   # the requests it knows (None: any)

    def __init__(self, host: str, port: int, *, token: str | None = None,
                 frame_timeout: float = FRAME_TIMEOUT_S) -> None:
        require_token(host, token)
        self.token, self.frame_timeout = token, frame_timeout
        self.session = ClientSession(token, self.PROGRAM)
        self.lock = threading.RLock()
        self.conn: Connection | None = None
        self.disconnected = threading.Event()   # set when a client has gone
        self.ended = threading.Event()          # set once the program's end was told (exited, terminated)
        self.terminating = False                # the client ended the program
        self.listener = socket.create_server((host, port))
        self.host, self.port = self.listener.getsockname()[:2]

    def serve(self) -> None:
        """Start accepting clients (the subclass calls it last, once its state is there)."""
        start_thread(self._accept_loop, f"{self.THREADS}-accept")

    # -- what a subclass adds ---------------------------------------------------------------------------

    def request(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any]) -> Any:
        """A request past the session's order: its response body, or ANSWERED when it answered itself."""
        raise DapError(f"unsupported request {command!r}")

    def on_attach(self, conn: Connection, req: dict[str, Any]) -> Any:
        """The client attached (token checked): answer it (or return the body) and start what follows."""
        return None

    def terminate(self) -> None:
        """End the program (the client asked for it)."""

    def new_session(self) -> None:
        """Forget the last client's session (under the lock): a new client comes, or the last one went."""

    # -- state ---------------------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self.session.state

    @property
    def authenticated(self) -> bool:
        return self.session.authenticated

    def _reset(self) -> None:
        self.session.reset()
        self.new_session()

    # -- threads -------------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return                                    # the listener was closed
            with self.lock:
                busy = self.conn is not None
            if busy and self.disconnected.wait(LEAVE_WAIT_S):
                busy = False                              # the last client was just leaving
            conn = Connection(sock, self.frame_timeout)
            if busy:
                self.event("output", {"category": "important", "output": "dynstep: another debug client is "
                                      f"attached to this {self.PLACE}; only one at a time\n"}, conn)
                conn.flush_and_close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conn = conn
                self._reset()
                self.disconnected.clear()
            start_thread(self._read_loop, f"{self.THREADS}-reader", conn)

    def _read_loop(self, conn: Connection) -> None:
        try:
            for body in conn.bodies(lambda exc: self._broken(conn, exc)):
                try:
                    req, command, args = parse_request(body)
                except BadRequest as exc:
                    if exc.fatal:
                        self._unanswerable(conn, exc.req, str(exc))
                        break
                    self.respond(conn, exc.req, error=str(exc))
                    continue
                self.answer(conn, req, lambda: self.dispatch(conn, req, command, args))
                if command == "disconnect":
                    self._leave(conn)
                    break
        finally:
            self._client_gone(conn)
            conn.close()

    def _broken(self, conn: Connection, exc: Exception) -> None:
        emit(Warning_(f"{self.WARNS}: closing the client's connection: {exc}"))
        if isinstance(exc, ProtocolError):
            refuse(conn, {"seq": 0, "command": ""}, f"a frame that cannot be read ({exc})", self.WHO)

    def _unanswerable(self, conn: Connection, req: dict[str, Any], why: str) -> None:
        emit(Warning_(f"{self.WARNS}: the client sent {why}; closing its connection"))
        refuse(conn, req, why, self.WHO)

    # -- the session (reader thread) --------------------------------------------------------------------

    def dispatch(self, conn: Connection, req: dict[str, Any], command: str, args: dict[str, Any]) -> Any:
        if self.COMMANDS is not None and command not in self.COMMANDS:
            raise DapError(f"unsupported request {command!r}")
        self.session.check_order(command)
        if command == "initialize":
            with self.lock:
                self.session.initialize(args)
            return CAPABILITIES
        if command == "launch":
            raise DapError(LAUNCH_REFUSED)
        if command == "attach":
            return self._attach(conn, req, args)
        if command == "disconnect":
            self.session.leave(args)
            return None   # the response goes out, then the endpoint drops the client (_leave)
        return self.request(conn, req, command, args)

    def _attach(self, conn: Connection, req: dict[str, Any], args: dict[str, Any]) -> Any:
        with self.lock:
            allowed = self.session.authenticate(args)
            if allowed:
                self.session.attach()
        if not allowed:
            self.respond(conn, req, error=f"attach refused: this dynstep {self.SERVES} needs its token (the \"token\" "
                         f"attribute of the attach configuration, printed when the {self.SERVES} started)")
            self.drop(conn)
            return ANSWERED
        return self.on_attach(conn, req)

    def _leave(self, conn: Connection) -> None:
        """After `disconnect`: a program it terminated is waited for (bounded), so the client hears
        `exited` and `terminated` before the connection closes; then the client is dropped."""
        session = self.session
        if session.leaving and session.goodbye.get("terminateDebuggee") is True and not self.ended.is_set():
            self.terminate()
        if session.leaving and self.terminating and not self.ended.is_set():
            if not self.ended.wait(TERMINATE_WAIT_S):
                self.event("output", {"category": "important", "output": f"dynstep: the {self.PROGRAM} has not "
                                      f"ended {TERMINATE_WAIT_S:.0f} s after the client terminated it\n"}, conn)
                self.event("terminated", {}, conn)
        self.drop(conn)

    def _client_gone(self, conn: Connection) -> bool:
        """Forget the client (whether it was this endpoint's client)."""
        with self.lock:
            if self.conn is not conn:
                return False
            self.conn = None
            self._reset()
            self.disconnected.set()
        return True

    def drop(self, conn: Connection) -> None:
        self._client_gone(conn)
        conn.flush_and_close()

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)   # wakes the accept thread (close alone leaves it in accept())
        except OSError:
            pass
        try:
            self.listener.close()
        except OSError:
            pass
        with self.lock:
            conn = self.conn
        if conn is not None:
            conn.flush_and_close(timeout=1.0)
            self._client_gone(conn)

    # -- messages ----------------------------------------------------------------------------------------

    def answer(self, conn: Connection, req: dict[str, Any], work: Callable[[], Any]) -> None:
        """Run a handler; its body, or any failure as an error response (never a dead thread)."""
        try:
            body = work()
        except DapError as exc:
            return self.respond(conn, req, error=str(exc))
        except Exception as exc:
            return self.respond(conn, req, error=f"{type(exc).__name__}: {exc}")
        if body is not ANSWERED:
            self.respond(conn, req, body)

    def respond(self, conn: Connection, req: dict[str, Any], body: Any = None, *, error: str | None = None) -> None:
        reply(conn, req, body, error=error)

    def event(self, name: str, body: dict[str, Any] | None = None, conn: Connection | None = None) -> None:
        conn = conn or self.conn
        if conn is not None and (problem := notify(conn, name, body)):
            emit(Warning_(f"{self.WARNS}: dropped an event {name!r} that could not be encoded: {problem}"))
