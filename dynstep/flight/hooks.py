"""The process hooks a flight recorder installs, and removes in `Hooks.remove()`.

- torch.optim's global step hooks (`register_optimizer_step_pre_hook` / `..._post_hook`): the end of a
  step, and the moment before an optimizer changes parameters in place (a pending trigger's graph
  inputs are copied then);
- SIGTERM and SIGINT (the `signal` rule, main thread only): dump, then do what the handler that was
  there would have done (the default: die by the signal; Python's SIGINT handler: KeyboardInterrupt).
  A signal that lands in a Dynamo guard check is taken again a moment later: the guard check drops
  any exception raised in it, KeyboardInterrupt included (the program would run on);
- `sys.excepthook` (the `exception` rule): an exception ending the program dumps before it is printed;
- `atexit`: a trigger still pending when the program ends (its step never finished) is dumped.

    hooks = Hooks.install(recorder); ...; hooks.remove()
"""

from __future__ import annotations

import _thread
import atexit
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

import torch.optim.optimizer as optim_hooks

from .. import _compat

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Target(Protocol):
    """What the hooks call (the FlightRecorder)."""

    def optimizer_pre(self) -> None: ...
    def optimizer_post(self) -> None: ...
    def on_signal(self, signum: int) -> None: ...
    def on_exception(self, exc: BaseException) -> None: ...
    def at_exit(self) -> None: ...


@dataclasses.dataclass
class Hooks:
    handles: list[Any]
    signals: dict[int, Any]
    excepthook: Callable[..., Any] | None
    exit: Callable[[], None] | None

    @classmethod
    def install(cls, target: Target, *, signals: bool, exceptions: bool) -> "Hooks":
        handles = [optim_hooks.register_optimizer_step_pre_hook(lambda opt, args, kwargs: target.optimizer_pre()),
                   optim_hooks.register_optimizer_step_post_hook(lambda opt, args, kwargs: target.optimizer_post())]
        hooks = cls(handles, {}, None, target.at_exit)
        atexit.register(target.at_exit)
        if signals and threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                hooks.signals[signum] = signal.signal(signum, _handler(target, hooks))
        if exceptions:
            hooks.excepthook = sys.excepthook
            sys.excepthook = _excepthook(target, hooks.excepthook)
        return hooks

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self.signals.items():
                signal.signal(signum, previous)
        self.signals = {}
        if self.excepthook is not None:
            sys.excepthook = self.excepthook
            self.excepthook = None
        if self.exit is not None:
            atexit.unregister(self.exit)
            self.exit = None


def _handler(target: Target, hooks: Hooks) -> Callable[[int, Any], None]:
    def on_signal(signum: int, frame: Any) -> None:
        if _compat.in_dynamo_guard(frame):
            _again_soon(signum)                  # this handler stays: it runs again outside the guard
            return
        previous = hooks.signals.pop(signum, signal.SIG_DFL)
        signal.signal(signum, previous)          # once: the next one goes where it went before
        try:
            target.on_signal(signum)
        finally:
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signum)     # die by the signal, as without dynstep
    return on_signal


def _again_soon(signum: int, delay: float = 0.01) -> None:
    """The signal once more, shortly, from a helper thread (Python runs it on the main thread)."""
    timer = threading.Timer(delay, _thread.interrupt_main, (signum,))
    timer.daemon = True
    timer.start()


def _excepthook(target: Target, previous: Callable[..., Any]) -> Callable[..., Any]:
    def hook(kind: type, exc: BaseException, tb: Any) -> None:
        if isinstance(exc, Exception):   # not KeyboardInterrupt (the signal rule's) nor dynstep's quit
            target.on_exception(exc)
        previous(kind, exc, tb)
    return hook
