"""JSON has no NaN or Infinity: how dynstep writes a non-finite float wherever it writes JSON.

A non-finite float becomes the string "nan", "inf" or "-inf" (what `float()` reads back); a
dataclass becomes an object of its fields, a tuple a list. Recordings (records.jsonl, a flight
dump's lines), `dynstep report --json`, `DiffReport.to_json()` and `Comparison.to_json()` all write
their numbers through here, so every reader meets one spelling.

    json_float(float("-inf"))                    -> "-inf"
    json_safe({"stats": Stats(...), "shape": (2, 3)})   -> {"stats": {"min": ..., "nan": 0, ...}, "shape": [2, 3]}
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


def json_float(value: float) -> float | str:
    """`value` itself when finite, else "nan", "inf" or "-inf"."""
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float spelled as a string, dataclasses as dicts, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_safe(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
