"""Which mechanism the bytecode stepper runs on, for this torch and this Python.

Three questions, each answered once when `step_bytecode()` opens (and by `dynstep doctor`):

    which code objects did Dynamo produce?
        "callback": torch's bytecode-debugger callback (torch 2.12+), called before each one runs,
                    also for code compiled before the stepper started;
        "hook":     Dynamo's bytecode hook (`register_bytecode_hook`, every torch dynstep supports),
                    called as each one is made, plus Dynamo's record of those made before.
    how is the value stack read?
        "torch":    torch's `_get_frame_value_stack_with_depth` (comes with the callback);
        "native":   dynstep's own reader, csrc/frame_stack.c (`dynstep.bytecode.framestack`).
    where do instruction events come from?
        "settrace" on Python 3.11; "sys.monitoring" on 3.12+ (a tool id other than the debugger's).

`auto` prefers torch's own callback and stack reader where torch has them; otherwise the hook and
the native reader. `DYNSTEP_BYTECODE_MECHANISM=callback|hook|auto` forces one (the tests run the
whole stepper under both on a torch that has both).

    m = choose()          # Mechanism(codes="hook", stack="native", events="settrace", forced=False)
    m.describe()          # one line for doctor
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
from typing import Any

from .. import _compat
from ..core.errors import UnsupportedTorch
from . import framestack

ENV = "DYNSTEP_BYTECODE_MECHANISM"
CHOICES = ("auto", "callback", "hook")


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """What one step_bytecode() block runs on (the module docstring explains each field's values)."""

    codes: str       # callback | hook
    stack: str       # torch | native
    events: str      # settrace | sys.monitoring
    forced: bool     # chosen by DYNSTEP_BYTECODE_MECHANISM, not by what torch has

    def describe(self) -> str:
        codes = ("torch's bytecode-debugger callback" if self.codes == "callback"
                 else "Dynamo's bytecode hook (register_bytecode_hook)")
        stack = ("torch's _get_frame_value_stack_with_depth" if self.stack == "torch"
                 else "dynstep's native reader (csrc/frame_stack.c)")
        how = f"forced by {ENV}={self.codes}" if self.forced else "auto"
        return f"code objects from {codes}; value stack by {stack}; instruction events by {self.events} ({how})"

    def read_stack(self, frame: types.FrameType, depth: int) -> list[Any]:
        """The frame's value stack, bottom first, NULL slots as "<NULL>"; the native reader raises
        framestack.FrameStackUnavailable (with the reason) when it could not be built."""
        if self.stack == "torch":
            return _compat.frame_value_stack(frame, depth)
        return framestack.read(frame, depth)


def events_source() -> str:
    return "sys.monitoring" if hasattr(sys, "monitoring") else "settrace"


def requested() -> str:
    value = (os.environ.get(ENV) or "auto").strip().lower()
    if value not in CHOICES:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(CHOICES)} (auto: torch's bytecode-debugger "
                         "hooks where torch has them, else Dynamo's bytecode hook and dynstep's native stack reader)")
    return value


def choose() -> Mechanism:
    """The mechanism for this torch and Python; UnsupportedTorch naming what is missing."""
    wanted = requested()
    callback_missing = _compat.bytecode_hooks_missing()
    if wanted == "callback" and callback_missing is not None:
        raise UnsupportedTorch(f"{ENV}=callback, but {callback_missing}; use {ENV}=hook or auto")
    if wanted == "callback" or (wanted == "auto" and callback_missing is None):
        return Mechanism("callback", "torch", events_source(), forced=wanted != "auto")
    hook_missing = _compat.bytecode_hook_missing()
    if hook_missing is not None:
        raise UnsupportedTorch(f"{hook_missing}, and {callback_missing or 'its debugger callback is not used'}")
    return Mechanism("hook", "native", events_source(), forced=wanted != "auto")


def unavailable() -> str | None:
    """Why the bytecode stepper cannot run on this torch, or None."""
    try:
        choose()
    except (UnsupportedTorch, ValueError) as exc:
        return str(exc)
    return None
