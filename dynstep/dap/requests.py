"""The session requests the server answers on its reader thread (the program may be running).

The session's order, the token, `initialize`, `launch`, `attach` and `disconnect` are the endpoint's
(endpoint.py, session.py: the same for the job's adapter); these are the rest: breakpoints,
exception filters, configurationDone (releases a program waiting for a client), threads, pause,
sources, terminate. The handlers are a fixed table (`HANDLERS`), never looked up by the name a
client sent.
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.events import Warning_, emit
from ..jobs import identity
from ..step.graphs import GRAPHS
from ..step.stepper import STEPPER
from .client_breaks import ClientBreakpoints
from .protocol import DapError
from .session import ClientSession
from .sources import Sources

if TYPE_CHECKING:
    from .protocol import Connection


class SessionRequests:
    """Mixed into `DapServer` (an `Endpoint`): the server's own session state and the handlers of its
    session requests."""

    lock: threading.RLock
    session: ClientSession
    held: Any
    ended: threading.Event
    terminating: bool
    on_terminate: Callable[[], None] | None
    event: Callable[..., None]            # the endpoint's: (name, body=None, conn=None)

    def init_session(self) -> None:
        self.sources = Sources()
        self.breakpoints = ClientBreakpoints(self._breakpoints_changed)
        self.configured = threading.Event()
        self.exited = False
        self.thread_ids: dict[int, tuple[int, str]] = {}
        GRAPHS.listen(self._compiled_here)   # a thread that compiles a graph runs compiled code
        self.new_session()

    def _compiled_here(self, entry: object) -> None:
        self.thread_id()
        if self.session.attached:   # an editor's loaded-sources view gains the new listing
            source = self.sources.listing(getattr(entry, "graph_id", ""))
            if source is not None:
                self.event("loadedSource", {"reason": "new", "source": source})

    def new_session(self) -> None:
        """The endpoint's hook: a new client starts with no breakpoints and the default filters."""
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

    def _breakpoints_changed(self, bodies: list[dict[str, Any]]) -> None:
        for body in bodies:
            self.event("breakpoint", {"reason": "changed", "breakpoint": body})

    # -- handlers ------------------------------------------------------------------------------------

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
            self.session.configure()
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
        """Every compiled graph's listing, the user files it comes from, other texts shown, and every stage
        of every compile (dynstep.stages), as sources read from this process."""
        from .stagesources import loaded_sources

        stages = loaded_sources(self.sources)     # registers each stage's text with the session's sources
        refs = {s["sourceReference"] for s in stages}
        return {"sources": [s for s in self.sources.loaded() if s.get("sourceReference") not in refs] + stages}

    def req_terminate(self, conn: "Connection", req: dict[str, Any], args: dict[str, Any]) -> Any:
        self.terminate()
        return None

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
    `dynstepWorldSize`: how a job adapter, dap/job.py, names this rank's threads)."""
    body: dict[str, Any] = {"name": os.path.basename(sys.argv[0] or "python"), "systemProcessId": os.getpid(),
                            "isLocalProcess": True, "startMethod": "attach"}
    ident = identity.current()
    if ident.multi:
        body.update(name=f"{body['name']} (rank {ident.rank} of {ident.world})", dynstepRank=ident.rank,
                    dynstepWorldSize=ident.world)
    return body


HANDLERS = {name[4:]: fn for name, fn in vars(SessionRequests).items() if name.startswith("req_")}
