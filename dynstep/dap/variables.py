"""What a DAP client sees of values at a stop: short texts, and the children of expandable values.

A tensor expands to ``shape``, ``dtype``, ``device``, ``stats`` (named) and its rows along dim 0
(indexed, paged with start/count): each row is a view, summarised on the device, so a client never
receives a copy of a large tensor. For a client that does not page (no `supportsVariablePaging`),
more than 100 rows come as groups ``[0:100]``, ``[100:200]``, ... (groups of groups past 10,000 rows),
each expanding to its rows, so every row is reachable. Handles (``variablesReference``) live for one
stop only.

    handles = Handles(); ref = handles.add(TensorChildren(t, "value", writer))
    handles.get(ref).children("indexed", 100, 50)      -> [Child("[100]", t[100], "value[100]"), ...]
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

from ..core.records import STAT_FIELDS, dtype_name
from ..probe.stats import stats_of, unsupported_reason
from ..step.values import safe_text
from .protocol import DapError

UNPAGED_LIMIT = 100          # rows returned for a request without start/count
TEXT_LIMIT = 240
SHORT_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
                "int32": "i32", "bool": "b8"}

#: writes `result` into the tensor `target` with the stepper's rules (shape, dtype); raises ValueError
Writer = Callable[[torch.Tensor, Any, str], None]


@dataclasses.dataclass(frozen=True)
class Child:
    name: str
    value: Any
    evaluate_name: str = ""


class Children(Protocol):
    def counts(self) -> tuple[int, int]: ...

    def children(self, filter_: str | None, start: int, count: int | None) -> list[Child]: ...

    def set(self, name: str, value: Any) -> Any: ...


class Handles:
    """variablesReference / frameId numbers of one stop (stale after a resume: the stop owns them)."""

    def __init__(self) -> None:
        self._next = itertools.count(1)
        self._items: dict[int, Any] = {}

    def add(self, item: Any) -> int:
        ref = next(self._next)
        self._items[ref] = item
        return ref

    def get(self, ref: Any, kind: type | tuple[type, ...] = object) -> Any:
        item = self._items.get(ref) if type(ref) is int else None
        if item is None or not isinstance(item, kind):
            raise DapError(f"no such reference {ref!r} in this stop (stale after the program resumed?)")
        return item

    def clear(self) -> None:
        self._items.clear()


def short(value: Any) -> str:
    """One line for a value: tensors as dtype[shape] device and a few stats, others by repr."""
    if isinstance(value, RowRange):
        text = str(value)
    elif isinstance(value, torch.Tensor):
        try:
            text = tensor_summary(value)
        except Exception:   # a FakeTensor at a compile-time stop, an odd subclass: its type is enough
            text = f"{type(value).__name__} {dtype_name(value.dtype)}{list(value.shape)} {value.device}"
    elif isinstance(value, str):
        text = value
    else:
        text = safe_text(value)
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT - 1] + "…"


def tensor_summary(t: torch.Tensor) -> str:
    dtype = dtype_name(t.dtype)
    head = f"{SHORT_DTYPES.get(dtype, dtype)}{list(t.shape)} {t.device}"
    if t.dim() == 0 or unsupported_reason(t) is not None:
        return safe_text(t)
    if t.numel() <= 8 and t.dim() == 1:
        return head + "  " + safe_text(t.detach().tolist())
    if t.numel() == 0:
        return head + "  empty"
    s = stats_of(t)
    return f"{head}  min {_num(s.min)}  max {_num(s.max)}  mean {_num(s.mean)}" + \
        (f"  nan {s.nan}  inf {s.inf}" if s.nan or s.inf else "")


def _num(v: float) -> str:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    return f"{v:.4g}"


def type_name(value: Any) -> str:
    if isinstance(value, RowRange):
        return "rows"
    return "Tensor" if isinstance(value, torch.Tensor) else type(value).__name__


def expandable(value: Any, evaluate_name: str, writer: Writer | None) -> Children | None:
    """The children of a value a client can expand (None: a leaf)."""
    if isinstance(value, RowRange):
        return RangeChildren(value)
    if isinstance(value, torch.Tensor):
        real = value.dim() > 0 and type(value) in (torch.Tensor, torch.nn.Parameter)
        return TensorChildren(value, evaluate_name, writer) if real else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return MappingChildren({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, evaluate_name)
    if isinstance(value, Mapping) and value:
        return MappingChildren(dict(value), "")
    if isinstance(value, (list, tuple)) and value:
        return MappingChildren({f"[{i}]": v for i, v in enumerate(value)}, "")
    return None


class MappingChildren:
    """Named children; `setter(name, value)` (or none: read-only)."""

    def __init__(self, items: dict[str, Any], prefix: str = "",
                 setter: Callable[[str, Any], Any] | None = None) -> None:
        self.items, self.prefix, self.setter = items, prefix, setter

    def counts(self) -> tuple[int, int]:
        return len(self.items), 0

    def children(self, filter_: str | None, start: int, count: int | None) -> list[Child]:
        if filter_ == "indexed":
            return []
        names = list(self.items)[start:]
        names = names[:count] if count else names[:UNPAGED_LIMIT * 10]
        return [Child(n, self.items[n], self._evaluate_name(n)) for n in names]

    def _evaluate_name(self, name: str) -> str:
        if not name.isidentifier():
            return ""
        return f"{self.prefix}.{name}" if self.prefix else name

    def set(self, name: str, value: Any) -> Any:
        if self.setter is None or name not in self.items:
            raise DapError(f"{name!r} cannot be changed here (read-only)")
        return self.setter(name, value)


class TensorChildren:
    """shape, dtype, device, stats, then rows [0], [1], ... (paged; views, never copies); `grouped()`:
    the same with more than UNPAGED_LIMIT rows as RowRange groups, for a client that does not page."""

    def __init__(self, t: torch.Tensor, evaluate_name: str, writer: Writer | None) -> None:
        self.t, self.expr, self.writer = t, evaluate_name, writer

    def _named(self) -> dict[str, Any]:
        t = self.t
        stats: Any = "not available: " + (unsupported_reason(t) or "empty") \
            if unsupported_reason(t) or t.numel() == 0 else stats_of(t)
        if not isinstance(stats, str):
            stats = {k: getattr(stats, k) for k in STAT_FIELDS}
        return {"shape": list(t.shape), "dtype": dtype_name(t.dtype), "device": str(t.device),
                "stats": stats}

    def counts(self) -> tuple[int, int]:
        return 4, int(self.t.shape[0])

    def grouped(self) -> list[Child]:
        """Every child, rows past UNPAGED_LIMIT in groups (a plain request from a client that does not page)."""
        rows = int(self.t.shape[0])
        if rows <= UNPAGED_LIMIT:
            return self.children(None, 0, None)
        whole = RangeChildren(RowRange(self.t, 0, rows, self.expr, self.writer))
        return self.children("named", 0, None) + whole.children(None, 0, None)

    def children(self, filter_: str | None, start: int, count: int | None) -> list[Child]:
        out = []
        if filter_ != "indexed":
            out += [Child(n, v) for n, v in self._named().items()]
        if filter_ != "named":
            rows = int(self.t.shape[0])
            lo = max(0, start) if filter_ == "indexed" else 0
            hi = min(rows, lo + (count if count else UNPAGED_LIMIT))
            out += [Child(f"[{i}]", self.t[i], f"{self.expr}[{i}]" if self.expr else "") for i in range(lo, hi)]
        return out

    def set(self, name: str, value: Any) -> Any:
        return set_row(self.t, 0, int(self.t.shape[0]), self.expr, self.writer, name, value)


def set_row(t: torch.Tensor, lo: int, hi: int, expr: str, writer: Writer | None, name: str, value: Any) -> Any:
    """Write `value` into the row `name` ("[i]", lo <= i < hi) with the stepper's rules."""
    if writer is None:
        raise DapError("this value is read-only at this stop")
    if not (name.startswith("[") and name.endswith("]") and name[1:-1].isdigit()):
        raise DapError(f"only rows or elements ([i]) of a tensor can be set, not {name!r}")
    i = int(name[1:-1])
    if not lo <= i < hi:
        raise DapError(f"index {i} is out of range for a dimension of size {t.shape[0]}"
                       + (f" (this group holds rows {lo} to {hi - 1})" if (lo, hi) != (0, t.shape[0]) else ""))
    target = t[i]
    try:
        writer(target, value, f"{expr or 'tensor'}{name}")
    except ValueError as exc:
        raise DapError(str(exc)) from None
    return target


@dataclasses.dataclass(frozen=True)
class RowRange:
    """Rows lo..hi-1 of a tensor, shown as one expandable group to a client that does not page."""

    t: torch.Tensor
    lo: int
    hi: int
    expr: str
    writer: Writer | None

    def groups(self) -> list["RowRange"]:
        """Sub-groups of 100, 10,000, ... rows: at most UNPAGED_LIMIT of them."""
        step = UNPAGED_LIMIT
        while (self.hi - self.lo + step - 1) // step > UNPAGED_LIMIT:
            step *= UNPAGED_LIMIT
        return [RowRange(self.t, a, min(a + step, self.hi), self.expr, self.writer)
                for a in range(self.lo, self.hi, step)]

    def __str__(self) -> str:
        return f"rows {self.lo} to {self.hi - 1} of {list(self.t.shape)}"


class RangeChildren:
    """A RowRange's children: its rows when there are at most UNPAGED_LIMIT, else its sub-groups."""

    def __init__(self, rows: RowRange) -> None:
        self.rows = rows

    def _all(self) -> list[Child]:
        r = self.rows
        if r.hi - r.lo <= UNPAGED_LIMIT:
            return [Child(f"[{i}]", r.t[i], f"{r.expr}[{i}]" if r.expr else "") for i in range(r.lo, r.hi)]
        return [Child(f"[{g.lo}:{g.hi}]", g) for g in r.groups()]

    def counts(self) -> tuple[int, int]:
        return len(self._all()), 0

    def children(self, filter_: str | None, start: int, count: int | None) -> list[Child]:
        kids = [] if filter_ == "indexed" else self._all()[start:]
        return kids[:count] if count else kids

    def set(self, name: str, value: Any) -> Any:
        r = self.rows
        return set_row(r.t, r.lo, r.hi, r.expr, r.writer, name, value)
