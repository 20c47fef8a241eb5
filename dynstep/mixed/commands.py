"""`native` and `native break` at a stop of the runtime stepper (`cmd_native` in
dynstep/step/commands.py calls `native`; the engine API behind it is `lookup.native_report`).

    native            which native code computes this node (Inductor C++ / Triton kernel, aten kernel)
    native break      a debugger breakpoint on exactly that code, then run on to it
    native break 2    only the second kernel listed
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..core.events import emit
from .events import NativeShown, NativeTrapped
from .lookup import native_report
from .trap import trap

if TYPE_CHECKING:
    from ..core.stop import Stop

USAGE = "usage: native | native break [N]   (N: only the N-th kernel `native` lists)"


class AtStop(Protocol):
    """What `native` needs of the stepper: its stop, and `continue` after the trap."""

    current: "Stop | None"

    def run_command(self, name: str, arg: str = "", *, line: str | None = None) -> bool: ...


def native(stepper: AtStop, arg: str) -> bool:
    """Run `native [break [N]]` at the stepper's current stop; True when the program resumes."""
    stop = stepper.current
    assert stop is not None
    words = arg.split()
    if words and (words[0] != "break" or len(words) > 2 or (len(words) == 2 and not words[1].isdigit())):
        raise ValueError(USAGE)
    report = native_report(stop.site, device=str(stop.value.device))
    if not words:
        emit(NativeShown(report))
        return False
    only = None
    if len(words) == 2:
        index = int(words[1])
        if not 1 <= index <= len(report.kernels):
            raise ValueError(f"kernel {index} does not exist: `native` lists {len(report.kernels)} for node "
                             f"{report.node}")
        only = (report.kernels[index - 1],)
    outcome = trap(report, only)
    emit(NativeTrapped(report, outcome))
    if outcome.trapped:   # the debugger holds the breakpoints: run on to the kernel
        return stepper.run_command("continue")
    return False
