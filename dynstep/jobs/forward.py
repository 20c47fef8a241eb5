"""Commands sent to another rank (`p@1 value.mean()`) and the events it answers with, as JSON.

    text = encode([Evaluated("value.mean()", "0.12", None)])
    decode(text) -> [Evaluated(...)]      (the asking rank's front end renders them)

Only the events a forwarded command emits cross: Evaluated (with its TensorView), Info,
CommandFailed, WhereShown, GraphShown, HelpShown; anything else arrives as an Info with its text.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..core.events import CommandFailed, Evaluated, GraphShown, HelpShown, Info, TensorView, WhereShown
from ..core.records import GraphRow, Stats

FORWARDED = frozenset({"print", "set", "where", "graph", "record", "help", "watch"})
_TYPES = {cls.__name__: cls for cls in (Evaluated, Info, CommandFailed, WhereShown, GraphShown, HelpShown)}


def encode(events: list[object]) -> str:
    out = []
    for event in events:
        if type(event).__name__ in _TYPES:
            out.append({"type": type(event).__name__, "fields": dataclasses.asdict(event)})  # type: ignore[arg-type]
        else:
            out.append({"type": "Info", "fields": {"message": str(event)}})
    return json.dumps(out, default=str)


def decode(text: str) -> list[object]:
    events: list[object] = []
    for item in json.loads(text):
        cls = _TYPES.get(item.get("type"), Info)
        fields = {k: _tuples(v) for k, v in item.get("fields", {}).items()}
        if cls is Evaluated and fields.get("tensor"):
            view = dict(item["fields"]["tensor"])
            view["stats"] = Stats(**view["stats"]) if view.get("stats") else None
            fields["tensor"] = TensorView(**{k: (_tuples(v) if k != "stats" else v) for k, v in view.items()})
        if cls is GraphShown:
            fields["rows"] = tuple(GraphRow(**row) for row in item["fields"]["rows"])
        events.append(cls(**fields))
    return events


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value
