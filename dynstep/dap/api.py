"""`dynstep.serve_dap()`: serve the Debug Adapter Protocol from this process.

    dynstep.serve_dap(5679)                       # VS Code (or `dynstep attach localhost:5679`) attaches
    dynstep.serve_dap(5679, wait=True)            # hold here until a client has attached and configured
    dynstep.serve_dap("0.0.0.0:5679", token="s3cret")   # a non-loopback address needs a token

From then on every graph superstep compiles gets stop points (a client may set breakpoints at any
time; graphs without one run their plain variant), and stops are answered by the client.
`dynstep run --dap PORT` calls it before the script starts; DYNSTEP_DAP=PORT (DYNSTEP_DAP_WAIT=1,
DYNSTEP_DAP_TOKEN) starts it at the first superstep compile. Under torchrun each local rank
serves on PORT + LOCAL_RANK (`dynstep run --dap PORT -m torch.distributed.run` gives the workers
PORT + 1 and serves the job's adapter, one thread per rank, on PORT: job.py).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

from ..core import wiring
from ..core.errors import OptionsError
from ..core.events import Info, emit
from ..core.options import env_value
from ..step.stepper import STEPPER
from .frontend import DapFrontend, OutputSink
from .server import DapServer

DEFAULT_PORT = 5679
_lock = threading.Lock()
_server: DapServer | None = None
_saved: tuple[object, object] | None = None


def parse_address(text: str | int, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``5679`` / ``"5679"`` / ``"0.0.0.0:5679"`` -> (host, port)."""
    host, sep, port = str(text).strip().rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise OptionsError(f"a DAP address is PORT or HOST:PORT (e.g. 5679 or 127.0.0.1:5679), got {text!r}")
    return (host.strip("[]") if sep and host else default_host), int(port)


def serve_dap(port: int | str = DEFAULT_PORT, *, host: str | None = None, token: str | None = None,
              wait: bool = False, wait_timeout: float | None = None) -> DapServer:
    """Start the DAP server in this process (once; a second call returns the same server)."""
    global _server
    address_host, number = parse_address(port)
    host = host or address_host
    if number and os.environ.get("LOCAL_RANK", "").isdigit():   # torchrun: one server per local rank
        number += int(os.environ["LOCAL_RANK"])
    with _lock:
        if _server is None:
            _server = DapServer(host, number, token=token)
            _install(_server)
            atexit.register(_at_exit)
        server = _server
    emit(Info(f"dynstep: debug adapter listening on {server.host}:{server.port}"
              + (" (waiting for a client to attach)" if wait else "")))
    if wait:
        server.configured.wait(wait_timeout)
    return server


def serve_from_env() -> DapServer | None:
    """DYNSTEP_DAP=PORT|HOST:PORT, DYNSTEP_DAP_WAIT=1, DYNSTEP_DAP_TOKEN: serve when asked (idempotent)."""
    address = os.environ.get("DYNSTEP_DAP", "").strip()
    if not address or _server is not None:
        return _server
    wait = bool(env_value("DYNSTEP_DAP_WAIT"))
    return serve_dap(address, token=os.environ.get("DYNSTEP_DAP_TOKEN") or None, wait=wait)


def current() -> DapServer | None:
    return _server


def _install(server: DapServer) -> None:
    """The client answers every stop from now on; output events before the sink that was there."""
    global _saved
    frontend = DapFrontend(server)
    previous_sink = wiring.default_sink()
    _saved = (previous_sink, wiring.current_frontend_factory())
    wiring.install_sink(OutputSink(server, previous_sink))
    wiring.install_frontend_factory(lambda kind, commands: frontend)
    STEPPER.serve_everywhere(True)


def stop_serving(exit_code: int | None = None) -> None:
    """Say `exited` (with the program's exit code, when known) and `terminated`, close, restore the front ends."""
    global _server, _saved
    with _lock:
        server, _server = _server, None
        saved, _saved = _saved, None
    if server is None:
        return
    server.program_exited(exit_code, linger=5.0 if exit_code is not None else 0.0)
    if saved is not None:
        wiring.install_sink(saved[0])   # type: ignore[arg-type]
        wiring.install_frontend_factory(saved[1])   # type: ignore[arg-type]
    STEPPER.serve_everywhere(False)


def _at_exit() -> None:
    """A program that served DAP itself (serve_dap, DYNSTEP_DAP) is ending: Python tells an exit handler
    its exit code only when an uncaught exception ends it (`dynstep run` knows it always)."""
    uncaught = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    code = None if uncaught is None else 130 if isinstance(uncaught, KeyboardInterrupt) else 1
    stop_serving(code)
