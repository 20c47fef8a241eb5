"""How a distributed job ends from the debugger: `q` on one rank ends every rank with exit code 3.

Once a rank knows the job is quitting, a SIGTERM (torchrun's agent terminates the other workers as
soon as the first one exits) and the interpreter's teardown both end the process with the quit's
own code, so the launcher's summary shows 3 on every rank instead of -15.

    raise quitting(3)        # after the message was emitted
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading

from ..core.events import Warning_, emit

QUIT_CODE = 3


class RanksQuit(SystemExit):
    """Every rank of the job stops: `q` on one of them, or a rank that stopped answering."""


def quitting(code: int = QUIT_CODE) -> RanksQuit:
    """The exception that ends this rank, with the exit code made to stick (see the module docstring)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: os._exit(code))

    def hard_exit() -> None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)

    # registered last, so it runs first at exit: recordings are written through already (storage.py),
    # and a process group's teardown after a quit can wait on ranks that are gone
    atexit.register(hard_exit)
    return RanksQuit(code)


class TermGuard:
    """While a rank waits for others: a SIGTERM from the launcher says which rank it waited for."""

    def __init__(self, describe) -> None:
        self.describe = describe
        self.previous = None
        self.active = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> "TermGuard":
        if self.active:
            self.previous = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active and signal.getsignal(signal.SIGTERM) == self._on_term:
            signal.signal(signal.SIGTERM, self.previous)

    def _on_term(self, signum: int, frame: object) -> None:
        try:
            message = self.describe()
        except Exception:   # the store may be gone with the rank that failed
            message = "a rank has failed"
        emit(Warning_(f"terminated by the launcher while {message}"))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)   # keep -15, so the launcher names the rank that failed first
