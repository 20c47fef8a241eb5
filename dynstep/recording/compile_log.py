"""The process's compile log: graph breaks, recompiles and compiles (from torch's structured trace)
and the graphs superstep instrumented (`GraphPlan`), in the order they happened.

Collecting is on while a dynstep session is open or `dynstep run` runs (`collecting()`, nestable):
a handler on torch's trace logger reads the records torch writes at compile time anyway, so it
must be in place before the first compile (graph breaks are logged while Dynamo traces, before
any backend sees a graph). What was collected stays in the log; recordings keep it
(compile.jsonl), and listeners (a streaming recording, `dynstep run --explain`) see each entry as
it arrives.

    with collecting():
        torch.compile(f)(x)
    COMPILE_LOG.events()                 -> [CompileEvent, ...]
    remove = COMPILE_LOG.listen(print)   # every later entry
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any, Union

from .. import _compat
from .facts import CompileEvent, GraphPlan, KernelCount
from .trace_events import event_of

Entry = Union[CompileEvent, GraphPlan, KernelCount]


class CompileLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[Entry] = []
        self._listeners: list[Callable[[Entry], None]] = []
        self._handles: dict[str, Any] = {}        # graph id -> opaque trace handle (dynstep._compat.trace)
        self._pending: dict[str, int] = {}         # compile id -> index of a recompile still without a line
        self._users = 0
        self._stop: Callable[[], None] | None = None

    # -- entries --------------------------------------------------------------------------------
    def add(self, entry: Entry) -> None:
        with self._lock:
            announced = self._place(entry)
            listeners = list(self._listeners)
        for item in announced:
            for listener in listeners:
                listener(item)

    def _place(self, entry: Entry) -> list[Entry]:
        """Append `entry`; a recompile torch gave no user line waits for the compile it announced,
        whose line it takes. Returns the entries complete now."""
        if isinstance(entry, CompileEvent) and entry.kind == "recompile" and not entry.file:
            self._pending[entry.compile_id] = len(self._entries)
            self._entries.append(entry)
            return []
        out: list[Entry] = []
        if isinstance(entry, CompileEvent) and entry.kind == "compile" and entry.compile_id in self._pending:
            index = self._pending.pop(entry.compile_id)
            held = dataclasses.replace(self._entries[index], file=entry.file, line=entry.line,
                                       function=entry.function, source_text=entry.source_text)
            self._entries[index] = held
            out.append(held)
        self._entries.append(entry)
        return out + [entry]

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self._entries)

    def events(self) -> list[CompileEvent]:
        return [e for e in self.entries() if isinstance(e, CompileEvent)]

    def plans(self) -> list[GraphPlan]:
        return [e for e in self.entries() if isinstance(e, GraphPlan)]

    def mark(self) -> int:
        """Where the log is now: `since=` for `for_recording`."""
        with self._lock:
            return len(self._entries)

    def plan(self, graph_id: str, before: int | None = None) -> GraphPlan | None:
        """The latest plan of that graph (ids repeat after torch.compiler.reset()), before index `before`."""
        with self._lock:
            entries = self._entries[:before] if before is not None else self._entries
            return next((e for e in reversed(entries) if isinstance(e, GraphPlan) and e.graph == graph_id), None)

    def for_recording(self, since: int, graphs: set[str]) -> list[Entry]:
        """What a recording keeps: everything after `since`, and before it the latest plans of its
        graphs that were not compiled again since."""
        with self._lock:
            later = self._entries[since:]
        again = {e.graph for e in later if isinstance(e, GraphPlan)}
        earlier = [p for g in sorted(graphs - again) if (p := self.plan(g, before=since)) is not None]
        return earlier + later

    def listen(self, listener: Callable[[Entry], None]) -> Callable[[], None]:
        """Call `listener` with every later entry; returns the function that stops it."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    # -- where a graph's run-time artifacts go in the structured trace ------------------------------
    def set_handle(self, graph_id: str, handle: Any) -> None:
        if handle is not None:
            with self._lock:
                self._handles[graph_id] = handle

    def handle(self, graph_id: str) -> Any:
        return self._handles.get(graph_id)

    # -- collecting -------------------------------------------------------------------------------
    def acquire(self) -> None:
        """Start collecting (counted: the handler goes when the last user releases it)."""
        with self._lock:
            self._users += 1
            if self._users == 1:
                self._stop = _compat.add_listener(self._on_record)

    def release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            stop, self._stop = (self._stop, None) if self._users == 0 else (None, self._stop)
        if stop is not None:
            stop()

    @property
    def collecting(self) -> bool:
        return self._users > 0

    def _on_record(self, record: _compat.TraceRecord) -> None:
        event = event_of(record)
        if event is not None:
            self.add(event)


COMPILE_LOG = CompileLog()


@contextlib.contextmanager
def collecting() -> Iterator[CompileLog]:
    """Collect compile events into `COMPILE_LOG` inside the block (restored after, nestable)."""
    COMPILE_LOG.acquire()
    try:
        yield COMPILE_LOG
    finally:
        COMPILE_LOG.release()
