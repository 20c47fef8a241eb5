"""The session requests the server answers on its reader thread (the program may be running).

Order: initialize -> attach (with the token when one is required) -> configuration requests ->
configurationDone (releases a program waiting for a client) -> anything. `launch` is refused:
dynstep runs inside the program, clients attach to it. The handlers are a fixed table
(`HANDLERS`), never looked up by the name a client sent.
"""

from __future__ import annotations

import _thread
import hmac
import ipaddress
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.events import Warning_, emit
from ..jobs import identity
from ..step.graphs import GRAPHS
from ..step.stepper import STEPPER
from .breakpoints import Breakpoints
from .protocol import ANSWERED, DapError
from .sources import Sources

if TYPE_CHECKING:
    from .protocol import Connection

CAPABILITIES = {
    "supportsConfigurationDoneRequest": True, "supportsFunctionBreakpoints": True,
    "supportsConditionalBreakpoints": True, "supportsHitConditionalBreakpoints": True, "supportsLogPoints": True,
    "supportsEvaluateForHovers": True, "supportsSetVariable": True, "supportsSetExpression": True,
    "supportsExceptionInfoRequest": True, "supportsDelayedStackTraceLoading": True,
    "supportsDisassembleRequest": True, "supportsSteppingGranularity": True,
    "supportTerminateDebuggee": True, "supportsTerminateRequest": True, "supportsLoadedSourcesRequest": True,
    "exceptionBreakpointFilters": [{"filter": "nan", "label": "NaN/Inf in a compiled graph", "default": True,
                                    "description": "stop at the first node whose value is not finite "
                                                   "(the run needs nan='stop': dynstep run --nan stop)"}],
}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_token(host: str, token: str | None) -> None:
    """Listening beyond this machine needs a token (the process's server and a job's adapter alike)."""
    if not is_loopback(host) and not token:
        raise ValueError(f"dynstep: serving the debug adapter protocol on {host!r} (not a loopback address) "
                         "needs a token (--dap-token, or let `dynstep run` generate one)")


def token_matches(given: Any, token: str | None) -> bool:
    """The client's token against the server's (none needed when the server has none), in constant time."""
    return token is None or (isinstance(given, str) and
                             hmac.compare_digest(given.encode("utf-8", "replace"), token.encode()))


class SessionRequests:
    """Mixed into `DapServer`: session state and the handlers of session requests."""

    lock: threading.RLock
    token: str | None
    held: Any
    on_terminate: Callable[[], None] | None
    respond: Callable[..., None]          # DapServer's: (conn, req, body=None, *, error=None)
    event: Callable[..., None]            # DapServer's: (name, body=None, conn=None)
    drop: Callable[["Connection"], None]

    def init_session(self) -> None:
        self.sources = Sources()
        self.breakpoints = Breakpoints(self._breakpoints_changed)
        self.configured = threading.Event()
        self.exited = False
        self.terminating = False
        self.thread_ids: dict[int, tuple[int, str]] = {}
        GRAPHS.listen(self._compiled_here)   # a thread that compiles a graph runs compiled code
        self.reset_session()

    def _compiled_here(self, entry: object) -> None:
        self.thread_id()

    def reset_session(self) -> None:
        self.state = "none"                    # none -> initialized -> attached -> configured
        self.authenticated = self.token is None
        self.exception_filters = frozenset({"nan"})
        self.breakpoints.clear()

    def thread_id(self, thread: threading.Thread | None = None) -> int:
        """A small number for a Python thread that runs compiled code (the main thread is 1); threads
        are known from their first compile or stop."""
        thread = thread or threading.current_thread()
        with self.lock:
            if not self.thread_ids:
                main = threading.main_thread()
                self.thread_ids[main.ident or 0] = (1, main.name)
            entry = self.thread_ids.setdefault(thread.ident or 0, (len(self.thread_ids) + 1, thread.name))
            return entry[0]

    def check_order(self, command: str) -> None:
        state = self.state
        if command == "disconnect":
            return
        if command == "initialize":
            if state != "none":
                raise DapError("initialize was already received")
        elif state == "none":
            raise DapError("initialize first")
        elif command in ("attach", "launch"):
            if state != "initialized":
                raise DapError("attach was already received")
        elif state == "initialized":
            raise DapError("attach first")

    def session_request(self, conn: "Connection", req: dict[str, Any], command: str, args: dict[str, Any]) -> Any:
        self.check_order(command)
        return HANDLERS[command](self, conn, req, args)

    def _breakpoints_changed(self, bodies: list[dict[str, Any]]) -> None:
        for body in bodies:
            self.event("breakpoint", {"reason": "changed", "breakpoint": body})

    # -- handlers ------------------------------------------------------------------------------------

    def req_initialize(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        self._check_token(args, required=False)
        with self.lock:
            self.state = "initialized"
        return CAPABILITIES

    def req_launch(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        raise DapError("dynstep runs inside your program: start it with `dynstep run --dap PORT script.py` and use "
                       "an attach configuration (\"request\": \"attach\")")

    def req_attach(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        if not self._check_token(args, required=True):
            self.respond(conn, req, error="attach refused: this dynstep server needs its token (the \"token\" "
                         "attribute of the attach configuration, printed when the server started)")
            self.drop(conn)
            return ANSWERED
        with self.lock:
            self.state = "attached"
        self.respond(conn, req)
        self.event("initialized", None, conn)
        self.event("process", process_body(), conn)
        return ANSWERED

    def _check_token(self, args: dict[str, Any], *, required: bool) -> bool:
        if self.authenticated:
            return True
        if self.token is not None and token_matches(args.get("token"), self.token):
            self.authenticated = True
        return self.authenticated or not required

    def req_setBreakpoints(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        source = args.get("source") if isinstance(args.get("source"), dict) else {}
        wanted = args.get("breakpoints", [])
        if not isinstance(wanted, list) or not all(isinstance(b, dict) for b in wanted):
            raise DapError("setBreakpoints: breakpoints must be a list of objects with a line")
        path = source.get("path")
        if not isinstance(path, str) or not path:
            return {"breakpoints": [{"verified": False, "reason": "failed", "message": "breakpoints in a graph "
                                     "listing: use a function breakpoint with node:NAME"} for _ in wanted]}
        try:
            return {"breakpoints": self.breakpoints.set_source(path, wanted)}
        except ValueError as exc:
            raise DapError(str(exc)) from None

    def req_setFunctionBreakpoints(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        wanted = args.get("breakpoints", [])
        if not isinstance(wanted, list) or not all(isinstance(b, dict) for b in wanted):
            raise DapError("setFunctionBreakpoints: breakpoints must be a list of objects with a name (a selector)")
        return {"breakpoints": self.breakpoints.set_function(wanted)}

    def req_setExceptionBreakpoints(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        filters = [f for f in args.get("filters", []) if isinstance(f, str)] \
            if isinstance(args.get("filters", []), list) else []
        self.exception_filters = frozenset(filters)
        return {"breakpoints": [{"verified": f == "nan", **({} if f == "nan" else {"message": f"unknown filter {f!r}"})}
                                for f in filters]}

    def req_configurationDone(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        with self.lock:
            self.state = "configured"
        self.configured.set()
        return None

    def req_threads(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        self.thread_id(threading.main_thread())
        with self.lock:
            known = dict(self.thread_ids)
        alive = {t.ident for t in threading.enumerate()}
        return {"threads": [{"id": tid, "name": name} for ident, (tid, name) in sorted(known.items(), key=lambda x: x[1])
                            if ident in alive]}

    def req_pause(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        if self.held is None:
            STEPPER.interrupt()   # the next node of the next compiled call stops, reason "pause"
        return None

    def req_source(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        source = args.get("source") if isinstance(args.get("source"), dict) else {}
        ref = source.get("sourceReference") or args.get("sourceReference")
        try:
            return {"content": self.sources.content(ref), "mimeType": "text/x-python"}
        except KeyError:
            raise DapError(f"no source with reference {ref!r} (graph listings have one)") from None

    def req_loadedSources(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        """Every stage of every compile (dynstep.stages), as sources read from this process."""
        from .stagesources import loaded_sources

        return {"sources": loaded_sources(self.sources)}

    def req_terminate(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        self.terminate()
        return None

    def req_disconnect(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        if args.get("terminateDebuggee") is True and not self.exited:
            self.terminate()
        return None   # the response goes out, then the server drops the client: a held thread runs on

    def terminate(self) -> None:
        """End the program: at a stop it raises dynstep.Abort there; while it runs, KeyboardInterrupt."""
        with self.lock:
            if self.exited or self.terminating:
                return
            self.terminating = True
            held = self.held
            if held is not None:
                held.inbox.put(None)
        emit(Warning_("the debug client terminated the program"))
        if self.on_terminate is not None:
            self.on_terminate()
        elif held is None:
            STEPPER.interrupt()          # inside compiled code: the next stop point ends it
            _thread.interrupt_main()     # in Python code: KeyboardInterrupt in the main thread


def process_body() -> dict[str, Any]:
    """The `process` event: this program; in a distributed job also its rank (`dynstepRank`,
    `dynstepWorldSize`: how a job adapter, remote/job.py, names this rank's threads)."""
    body: dict[str, Any] = {"name": os.path.basename(sys.argv[0] or "python"), "systemProcessId": os.getpid(),
                            "isLocalProcess": True, "startMethod": "attach"}
    ident = identity.current()
    if ident.multi:
        body.update(name=f"{body['name']} (rank {ident.rank} of {ident.world})", dynstepRank=ident.rank,
                    dynstepWorldSize=ident.world)
    return body


HANDLERS = {name[4:]: fn for name, fn in vars(SessionRequests).items() if name.startswith("req_")}
