"""Typed events the engine emits, and the sink that shows them.

The engine never prints: it calls `emit(event)`. Inside `use_sink(...)` events go to that sink
(tests, a DAP console's command answer, an editor session); otherwise to the one default sink the
composition root installed (`dynstep.core.wiring`: the terminal front end, `dynstep.front.console`).

    with use_sink(events_list.append):
        ...

A `use_sink` holds for the code that runs in its context (a `contextvars` scope, as sessions are:
dynstep.probe.sessions): the thread that entered it and tasks that copy its context. Events of
other threads (another thread's probe prints, the DAP reader thread's warnings) go to their own
sink, or to the default one; two threads capturing at once each get only their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

from . import wiring
from .records import GraphRow, Snapshot, Stats

if TYPE_CHECKING:
    from .sites import Site


@dataclasses.dataclass(frozen=True)
class ProbePrinted:
    """A probe with the `print` action fired."""

    snapshot: Snapshot
    values: tuple[float, ...] = ()  # the first values, for hand-placed probes (PrintAction.max_items)


@dataclasses.dataclass(frozen=True)
class Warning_:
    """Something the user should know that does not stop the program."""

    message: str


@dataclasses.dataclass(frozen=True)
class TensorView:
    """What a stop shows of a tensor: its type, statistics and the first few values."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    stats: Stats | None
    sample: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Stopped:
    """The stepper stopped at a node (reason: pause, break, step, nan)."""

    reason: str
    site: "Site"
    call: int
    tensor: TensorView | None
    watches: tuple[tuple[str, str], ...]
    writable: bool
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Evaluated:
    """`print EXPR` (and watches): the expression and its value."""

    expr: str
    text: str
    tensor: TensorView | None


@dataclasses.dataclass(frozen=True)
class WhereShown:
    """`where`: source around the line, module path and the Python stack into the compiled call."""

    file: str
    line: int
    lines: tuple[tuple[int, str], ...]
    module: str
    node: str
    target: str
    stack: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class GraphShown:
    """`graph`: the listing of the graph the stop is in, with the current node named."""

    graph: str
    rows: tuple[GraphRow, ...]
    current: str


@dataclasses.dataclass(frozen=True)
class HelpShown:
    entries: tuple[tuple[str, str], ...]    # ("print, p", first docstring line)


@dataclasses.dataclass(frozen=True)
class Info:
    """A stepper command's short answer."""

    message: str


@dataclasses.dataclass(frozen=True)
class CommandRead:
    """A scripted front end read this command (shown so a transcript reads like a session)."""

    line: str


@dataclasses.dataclass(frozen=True)
class CommandFailed:
    command: str
    message: str


@dataclasses.dataclass(frozen=True)
class Resumed:
    how: str      # continue, step, next


@dataclasses.dataclass(frozen=True)
class CompileView:
    """Something to show at a compile-time stop: kind in {"stop", "locals", "graph", "guards", "bt",
    "value", "help", "error"}."""

    kind: str
    title: str
    lines: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class CompileViewShown:
    """A view of a compile-time stop of dynstep.breakpoint() (dynstep.step.compile_stop)."""

    view: CompileView


Sink = wiring.Sink
_scoped: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("dynstep_sink", default=None)


def emit(event: object) -> None:
    sink = _scoped.get()
    if sink is None:
        sink = wiring.default_sink()
    sink(event)


@contextlib.contextmanager
def use_sink(sink: Sink) -> Iterator[None]:
    """Events emitted in this context go to `sink` until the block ends."""
    token = _scoped.set(sink)
    try:
        yield
    finally:
        try:
            _scoped.reset(token)
        except ValueError:   # left in another context than it was entered in: put back what it found
            previous = token.old_value
            _scoped.set(None if previous is contextvars.Token.MISSING else previous)
