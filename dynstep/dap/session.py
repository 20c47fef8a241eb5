"""One client's way through a DAP session: the same rules for the process's server and the job's adapter.

Order: initialize -> attach (with the token when one is required) -> configuration requests ->
configurationDone -> anything. Before a successful attach nothing but `initialize` is served
(`disconnect` included: a client that never attached cannot end the program). `launch` is refused:
dynstep runs inside the program, clients attach to it. A token may come with `initialize` or with
`attach`; it is compared in constant time. Listening beyond this machine needs a token.

    session = ClientSession(token, program="program")
    session.check_order("stackTrace")       # DapError("initialize first") until the order allows it
    session.initialize(args); session.authenticate(args) -> bool; session.attach(); session.configure()
    session.leave(args)                     # an accepted `disconnect`; its arguments are `goodbye`

The endpoint (endpoint.py) holds one per port and resets it for each new client.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from .protocol import DapError

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

LAUNCH_REFUSED = ("dynstep runs inside your program: start it with `dynstep run --dap PORT script.py` and use "
                  "an attach configuration (\"request\": \"attach\")")


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


class ClientSession:
    """The state of one client's session: none -> initialized -> attached -> configured.

    `program` names what the client would end ("program", "job") in the answers that say it runs on.
    The endpoint changes it under its lock; reads need none (one attribute at a time)."""

    def __init__(self, token: str | None, program: str = "program") -> None:
        self.token, self.program = token, program
        self.reset()

    def reset(self) -> None:
        self.state = "none"
        self.authenticated = self.token is None
        self.leaving = False                   # the client sent an accepted `disconnect`
        self.goodbye: dict[str, Any] = {}      # that disconnect's arguments (terminateDebuggee, restart)
        self.client_paging = False             # the client's initialize said supportsVariablePaging

    @property
    def attached(self) -> bool:
        return self.state in ("attached", "configured")

    def check_order(self, command: str) -> None:
        """DapError when `command` may not come now."""
        state = self.state
        if command == "disconnect" and state in ("none", "initialized"):
            raise DapError(f"disconnect: this client has not attached; nothing was done (the {self.program} runs on)")
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

    def initialize(self, args: dict[str, Any]) -> None:
        self.authenticate(args)
        self.state = "initialized"
        self.client_paging = args.get("supportsVariablePaging") is True

    def authenticate(self, args: dict[str, Any]) -> bool:
        """Whether the client has given the token (now, in these arguments, or before)."""
        if not self.authenticated and self.token is not None and token_matches(args.get("token"), self.token):
            self.authenticated = True
        return self.authenticated

    def attach(self) -> None:
        self.state = "attached"

    def configure(self) -> None:
        self.state = "configured"

    def leave(self, args: dict[str, Any]) -> None:
        self.leaving, self.goodbye = True, dict(args)
