"""Torch's structured trace (what `TORCH_TRACE` writes and tlparse renders): listening to it in
process, and writing dynstep's own artifacts into it under the right compile id.

    with listening(callback):            # callback(TraceRecord) for every structured record
        torch.compile(f)(x)
    handle = trace_handle()              # at compile time: where this compile's artifacts go
    trace_artifact("dynstep_pause", lambda: {...}, encoding="json", handle=handle)   # at run time

What this module returns is plain data (`TraceRecord`); a trace handle is opaque to the rest of
dynstep and only passed back here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

# torch/_logging/_internal.py: trace_log = logging.getLogger("torch.__trace"); it never propagates,
# and torch's trace_structured() logs one record per event whenever the logger has any handler.
TRACE_LOGGER = "torch.__trace"
log = logging.getLogger("dynstep")


@dataclasses.dataclass(frozen=True)
class TraceRecord:
    """One structured-trace event as plain data."""

    kind: str                 # the event's key: "artifact", "dynamo_start", ...
    compile_id: str           # "0/1" ("0/1_2" on a restarted attempt, "!0/0/1" under compiled autograd); "" if none
    name: str                 # the artifact's name ("" for other kinds)
    payload: str
    stack: tuple[tuple[str, int, str], ...] = ()   # dynamo_start: (file, line, function), outermost first
    path: str = ""            # inductor_output_code: the wrapper module the code was written to


class _Listener(logging.Handler):
    """A handler on torch's trace logger that turns its records into `TraceRecord`s."""

    def __init__(self, callback: Callable[[TraceRecord], None]) -> None:
        super().__init__(logging.DEBUG)
        self.callback = callback
        self.strings: dict[int, str] = {}   # torch interns file names: {"str": [name, id]} records

    def emit(self, record: logging.LogRecord) -> None:
        try:
            found = self._record(record)
            if found is not None:
                self.callback(found)
        except Exception:   # never let a listener's failure reach torch.compile
            log.debug("dynstep: a structured-trace record could not be read", exc_info=True)

    def _record(self, record: logging.LogRecord) -> TraceRecord | None:
        # torch/_logging/_internal.py (trace_structured): extra={"metadata": {...}, "payload": str | None}
        meta = getattr(record, "metadata", None)
        if not isinstance(meta, dict):
            return None
        if "str" in meta:
            text, index = meta["str"]
            self.strings[index] = text
            return None
        kind = next((k for k in meta if k not in _RESERVED), "")
        artifact = meta.get("artifact") if kind == "artifact" else None
        name = artifact.get("name", "") if isinstance(artifact, dict) else ""
        stack: tuple[tuple[str, int, str], ...] = ()
        if kind == "dynamo_start" and isinstance(meta.get(kind), dict):
            stack = tuple((self._file(f.get("filename")), int(f.get("line") or 0), str(f.get("name", "")))
                          for f in meta[kind].get("stack") or [] if isinstance(f, dict))
        payload = getattr(record, "payload", None)
        # torch/_inductor/graph.py (and codecache.py on a cache hit): {"inductor_output_code": {"filename",
        # "file_path"}}
        where = meta.get(kind) if isinstance(meta.get(kind), dict) else {}
        path = where.get("file_path") or where.get("filename") or ""
        return TraceRecord(kind=kind, compile_id=_compile_id(meta), name=str(name),
                           payload=payload if isinstance(payload, str) else "", stack=stack,
                           path=path if isinstance(path, str) else "")

    def _file(self, ref: Any) -> str:
        if not isinstance(ref, int):
            return str(ref or "")
        if ref not in self.strings:
            # torch/_logging/structured.py: intern_string() logs each name once per process, maybe before
            # this listener existed; INTERN_TABLE (name -> id) has them all
            from torch._logging.structured import INTERN_TABLE

            self.strings.update({index: name for name, index in INTERN_TABLE.items()})
        return self.strings.get(ref, str(ref))


# torch/_logging/_internal.py: trace_structured's reserved metadata keys (the rest names the event)
_RESERVED = {"rank", "compiled_autograd_id", "frame_id", "frame_compile_id", "attempt", "severity",
             "timestamp", "pathname", "thread", "subgraph_name", "has_payload", "stack"}


def _compile_id(meta: dict) -> str:
    # torch/_guards.py: CompileId.__str__ is "frame/compile", "!ca/frame/compile"; TraceId adds "_attempt"
    frame = meta.get("frame_id")
    if frame is None:
        return ""
    text = f"{frame}/{meta.get('frame_compile_id')}"
    if meta.get("attempt"):
        text += f"_{meta['attempt']}"
    autograd = meta.get("compiled_autograd_id")
    return f"!{autograd}/{text}" if autograd is not None else text


def add_listener(callback: Callable[[TraceRecord], None]) -> Callable[[], None]:
    """Start listening; returns the function that stops it."""
    logger = logging.getLogger(TRACE_LOGGER)
    handler = _Listener(callback)
    logger.addHandler(handler)
    return lambda: logger.removeHandler(handler)


@contextlib.contextmanager
def listening(callback: Callable[[TraceRecord], None]) -> Iterator[None]:
    remove = add_listener(callback)
    try:
        yield
    finally:
        remove()


def file_tracing() -> bool:
    """Is torch writing a structured trace to a file (TORCH_TRACE, or a trace handler with a folder)?"""
    # torch/_logging/_internal.py: LazyTraceHandler(root_dir) is installed on trace_log at import; with
    # no TORCH_TRACE its root_dir is None and it removes itself at the first record.
    from torch._logging._internal import LazyTraceHandler

    return any(isinstance(h, LazyTraceHandler) and (h.root_dir is not None or h.stream is not None)
               for h in logging.getLogger(TRACE_LOGGER).handlers)


def trace_handle() -> Any:
    """Opaque: the compile being traced now (None outside a compile); pass it to `trace_artifact`."""
    # torch/_guards.py: CompileContext.current_trace_id() -> TraceId(compile_id, attempt)
    from torch._guards import CompileContext

    return CompileContext.current_trace_id()


def trace_artifact(name: str, payload: Callable[[], Any], *, encoding: str = "string", handle: Any = None) -> None:
    """Write an artifact into the structured trace when one is being written to a file.

    At compile time it lands under the compile in progress. At run time (no compile in progress)
    `handle` (from `trace_handle()` during the compile) files it under that compile, so tlparse
    shows it next to the graph's other artifacts."""
    if not file_tracing():
        return
    # torch/_logging/_internal.py: trace_structured("artifact", metadata_fn, payload_fn); a payload that
    # is not a string is written as JSON (encoding "json" makes tlparse name the file *.json)
    from torch._logging import trace_structured

    def meta() -> dict:
        return {"name": name, "encoding": encoding}

    if handle is None:
        trace_structured("artifact", metadata_fn=meta, payload_fn=payload)
        return
    # torch/_guards.py: compile_context(CompileContext(compile_id)) is what trace_structured reads the
    # frame/compile ids (and the attempt) from
    from torch._guards import CompileContext, compile_context

    context = CompileContext(handle.compile_id)
    context.attempt = handle.attempt
    with compile_context(context):
        trace_structured("artifact", metadata_fn=meta, payload_fn=payload)
