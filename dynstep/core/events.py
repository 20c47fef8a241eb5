"""Typed events the engine emits, and the sink that shows them.

The engine never prints: it calls `emit(event)`. Inside `use_sink(...)` events go to that sink
(tests, an editor session); otherwise to the default sink the composition root installed
(`dynstep.core.wiring`: the terminal front end, `dynstep.front.console`).

    with use_sink(events_list.append):
        ...
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
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


Sink = Callable[[object], None]
_sink: Sink | None = None


def emit(event: object) -> None:
    sink = _sink
    if sink is None:
        sink = wiring.default_sink()
    sink(event)


@contextlib.contextmanager
def use_sink(sink: Sink) -> Iterator[None]:
    global _sink
    previous, _sink = _sink, sink
    try:
        yield
    finally:
        _sink = previous
