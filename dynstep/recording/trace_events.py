"""Reading torch's structured-trace records as `CompileEvent`s: compiles, graph breaks, recompiles.

torch writes them at compile time (what `TORCH_LOGS=graph_breaks,recompiles` prints, as text):

- ``dynamo_start``: a frame starts compiling; its stack names the user's function and line;
- artifact ``dynamo_graph_break_reason``: "Graph break in user code at FILE:LINE\\nGraph Break
  Reason: ...\\n\\n<type>\\n  Explanation: ...\\n  Hint: ...\\n\\n For more details about this
  graph break, please visit: <url>/gb/gb0124.html\\n\\nUser code traceback: ..." (or, when the frame
  is skipped, "Graph break: ... skip." with only the traceback); the hints, the graph-break id and
  its page are kept, and taken from Dynamo's registry of graph-break types when the message lacks them;
- artifact ``recompile_reasons``: one reason as text, several as a JSON list, each
  "<old compile id>: <guard>   # <code>  # <file:line> in <fn>\\nUser stack trace: ...".
  A reason without a user frame (a size mismatch) gets the line of the compile that follows.

    event_of(record)  -> CompileEvent | None
"""

from __future__ import annotations

import json
import linecache
import re

from .. import _compat
from .._compat import TraceRecord
from .facts import CompileEvent

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
    lines: list[str] = []
    if head is not None:
        file, line = head["file"], int(head["line"])
        body = payload[head.end():].split("\nUser code traceback:")[0]
        lines = [t.strip() for t in body.splitlines() if t.strip()]
        # lines[0]: "Graph Break Reason: Encountered graph break when attempting to trace ..."; then the type
        reason = lines[1] if len(lines) > 1 else (lines[0] if lines else "graph break")
    else:   # "Graph break: torch.compile cannot properly resume ... skip.": only the traceback says where
        file, line = (frames[-1][0], int(frames[-1][1])) if frames else ("", 0)
        reason = payload.strip().splitlines()[0] if payload.strip() else "graph break"
    detail = "\n".join([t for t in lines[2:] if not t.startswith(_NOT_DETAIL)][:_DETAIL_LINES])
    hints, gb_id, url = _explained(reason, lines[2:], payload)
    return CompileEvent("graph_break", record.compile_id, file, line, function, reason.removeprefix("Graph Break Reason: "),
                        detail=detail, source_text=line_text(file, line), hints=hints, gb_id=gb_id, doc_url=url)


_NOT_DETAIL = ("Developer debug context", "Hint:", "For more details about this graph break")
_GB_URL = re.compile(r"(https?://\S+/gb/gb(\d+)\.html)")


def _explained(reason: str, lines: list[str], payload: str) -> tuple[tuple[str, ...], str, str]:
    """(hints, gb id, page) from Dynamo's message, completed from its registry of graph-break types."""
    hints = tuple(t.removeprefix("Hint:").strip() for t in lines if t.startswith("Hint:"))
    found = _GB_URL.search(payload)
    gb_id, url = (f"GB{found.group(2)}", found.group(1)) if found else ("", "")
    known = _compat.graph_break_type(reason)
    if known is not None:
        hints = hints or _joined(known.hints)
        gb_id, url = gb_id or known.gb_id, url or known.url
    return hints, gb_id, url


def _joined(fragments: tuple[str, ...]) -> tuple[str, ...]:
    """The registry keeps a hint written over several source lines as fragments ending in a space."""
    out: list[str] = []
    for part in fragments:
        if out and out[-1].endswith(" "):
            out[-1] += part
        else:
            out.append(part)
    return tuple(h.strip() for h in out if h.strip())


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
