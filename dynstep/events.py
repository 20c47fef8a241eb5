"""Typed events the engine emits, and the sink a front end installs to show them.

The engine never prints: it calls `emit(event)`. A front end sets the sink; when none is set,
the default terminal front end (`dynstep.console`) is used, imported on first use.

    with use_sink(events_list.append):
        ...
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator

from .records import Snapshot


@dataclasses.dataclass(frozen=True)
class ProbePrinted:
    """A probe with the `print` action fired."""

    snapshot: Snapshot
    values: tuple[float, ...] = ()  # the first values, for hand-placed probes (PrintAction.max_items)


@dataclasses.dataclass(frozen=True)
class Warning_:
    """Something the user should know that does not stop the program."""

    message: str


Sink = Callable[[object], None]
_sink: Sink | None = None


def emit(event: object) -> None:
    sink = _sink
    if sink is None:
        from .console import default_sink

        sink = default_sink
    sink(event)


@contextlib.contextmanager
def use_sink(sink: Sink) -> Iterator[None]:
    global _sink
    previous, _sink = _sink, sink
    try:
        yield
    finally:
        _sink = previous
