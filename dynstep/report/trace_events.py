"""Reading torch's structured-trace records as `CompileEvent`s: compiles, graph breaks, recompiles.

torch writes them at compile time (what `TORCH_LOGS=graph_breaks,recompiles` prints, as text):

- ``dynamo_start``: a frame starts compiling; its stack names the user's function and line;
- artifact ``dynamo_graph_break_reason``: "Graph break in user code at FILE:LINE\\nGraph Break
  Reason: ...\\n\\n<type>\\n  Explanation: ...\\n\\nUser code traceback: ..." (or, when the frame
  is skipped, "Graph break: ... skip." with only the traceback);
- artifact ``recompile_reasons``: one reason as text, several as a JSON list, each
  "<old compile id>: <guard>   # <code>  # <file:line> in <fn>\\nUser stack trace: ...".
  A reason without a user frame (a size mismatch) gets the line of the compile that follows.

    event_of(record)  -> CompileEvent | None
"""

from __future__ import annotations

import json
import linecache
import re

from .._compat import TraceRecord
from .records import CompileEvent

_GB_HEAD = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\n")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]+)')
_DETAIL_LINES = 6


def event_of(record: TraceRecord) -> CompileEvent | None:
    if record.kind == "dynamo_start" and record.stack:
        file, line, function = record.stack[-1]
        return CompileEvent("compile", record.compile_id, file, line, function, f"compiling {function}",
                            source_text=line_text(file, line))
    if record.kind != "artifact":
        return None
    if record.name == "dynamo_graph_break_reason":
        return _graph_break(record)
    if record.name == "recompile_reasons":
        return _recompile(record)
    return None


def line_text(file: str, line: int) -> str:
    return linecache.getline(file, line).strip() if file and line > 0 else ""


def _user_part(payload: str) -> str:
    """The payload without torch's own traceback."""
    return payload.split("\nTraceback (most recent call last)")[0]


def _graph_break(record: TraceRecord) -> CompileEvent:
    payload = _user_part(record.payload)
    frames = _FRAME.findall(payload.split("User code traceback:", 1)[-1])
    function = frames[-1][2].strip() if frames else ""
    head = _GB_HEAD.search(payload)
    if head is not None:
        file, line = head["file"], int(head["line"])
        body = payload[head.end():].split("\nUser code traceback:")[0]
        lines = [t.strip() for t in body.splitlines() if t.strip()]
        # lines[0]: "Graph Break Reason: Encountered graph break when attempting to trace ..."; then the type
        reason = lines[1] if len(lines) > 1 else (lines[0] if lines else "graph break")
        detail = "\n".join(t for t in lines[2:] if not t.startswith("Developer debug context"))
    else:   # "Graph break: torch.compile cannot properly resume ... skip.": only the traceback says where
        file, line = (frames[-1][0], int(frames[-1][1])) if frames else ("", 0)
        reason = payload.strip().splitlines()[0] if payload.strip() else "graph break"
        detail = ""
    detail = "\n".join(detail.splitlines()[:_DETAIL_LINES])
    return CompileEvent("graph_break", record.compile_id, file, line, function, reason.removeprefix("Graph Break Reason: "),
                        detail=detail, source_text=line_text(file, line))


def _recompile(record: TraceRecord) -> CompileEvent:
    payload = record.payload.strip()
    reasons = [payload]
    if payload.startswith("["):
        try:
            loaded = json.loads(payload)
            reasons = [str(r) for r in loaded] if isinstance(loaded, list) else [payload]
        except ValueError:
            pass
    first = reasons[0] if reasons else ""
    guard = first.splitlines()[0] if first else "recompile"
    guard = guard.split("  #", 1)[0].strip()                 # the guard, without Dynamo's source comment
    frames = _FRAME.findall(first)
    file, line, function = (frames[-1][0], int(frames[-1][1]), frames[-1][2].strip()) if frames else ("", 0, "")
    detail = "\n".join(r.splitlines()[0].split("  #", 1)[0].strip() for r in reasons[1:_DETAIL_LINES + 1])
    return CompileEvent("recompile", record.compile_id, file, line, function, f"guard failed: {guard}",
                        detail=detail, source_text=line_text(file, line))
