"""An editor's breakpoints as dynstep selectors, and what happens when a stop point hits one.

A source breakpoint on ``model.py`` line 33 is the selector ``line:model.py:33`` (the result of that
line, at any call depth); a function breakpoint's name is any selector (``module:blocks.*.attn``,
``op:layer_norm``). Each resolves to the stop sites of the graphs compiled so far; one that
resolves to none is unverified ("pending") and is verified again whenever a graph compiles (a
`breakpoint` event tells the client). The sites go to the stepper as the owner "dap"'s
breakpoints (`Stepper.set_breaks`), so graphs with two variants run the stepping one only while
a breakpoint is in them.

At a hit, `hits(site_id, namespace)` applies conditions and hit counts and evaluates logpoints
(``{value.abs().max():.3f}`` interpolation, as an f-string over the stop's names).
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from collections.abc import Callable
from typing import Any

from ..core.errors import SelectorError
from ..core.sites import SITES
from ..graph import selectors as sel
from ..step.graphs import GRAPHS, GraphEntry, break_sites
from ..step.stepper import STEPPER

OWNER = "dap"
_HIT = re.compile(r"\s*(==|>=|>|%)?\s*(\d+)\s*")


@dataclasses.dataclass
class ClientBreakpoint:
    id: int
    selector: sel.Selector | None      # None: the name did not parse (never verified)
    kind: str                           # "source" | "function"
    path: str = ""
    line: int = 0
    condition: str = ""
    hit_condition: str = ""
    log_message: str | None = None
    error: str = ""
    sites: frozenset[int] = frozenset()
    hits: int = 0

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "verified": bool(self.sites)}
        if self.kind == "source":
            out.update(line=self.line, source={"name": os.path.basename(self.path), "path": self.path})
        if self.error:
            out.update(message=self.error, reason="failed")
        elif not self.sites:
            where = f"line {self.line}" if self.kind == "source" else self.selector.text if self.selector else ""
            out.update(message=f"no compiled graph covers {where} yet (verified when one compiles)",
                       reason="pending")
        return out


def hit_condition_holds(condition: str, hits: int) -> bool:
    """VS Code's hit counts: "5" / "== 5", ">= 5", "> 5", "% 5"; anything else always holds."""
    m = _HIT.fullmatch(condition or "")
    if not condition or not m:
        return True
    op, n = m.group(1) or "==", int(m.group(2))
    return {"==": hits == n, ">=": hits >= n, ">": hits > n, "%": n > 0 and hits % n == 0}[op]


def log_text(message: str, namespace: dict[str, Any]) -> str:
    """A logpoint's message with ``{expr}`` / ``{expr:.3f}`` filled in from the stop's names."""
    try:
        return str(eval("f" + repr(message), {"__builtins__": __builtins__}, namespace))
    except Exception:   # one bad piece must not hide the others: fill in piece by piece
        def one(m: re.Match[str]) -> str:
            expr, _, spec = m.group(1).partition(":")
            try:
                return format(eval(expr, {"__builtins__": __builtins__}, namespace), spec)
            except Exception as exc:
                return f"<{type(exc).__name__}: {exc}>"
        return re.sub(r"\{([^{}]+)\}", one, message).replace("{{", "{").replace("}}", "}")


class ClientBreakpoints:
    """The client's breakpoints; `changed(bodies)` is called for breakpoints a new graph verified."""

    def __init__(self, changed: Callable[[list[dict[str, Any]]], None]) -> None:
        self._lock = threading.Lock()
        self._next = 1
        self._source: dict[str, list[ClientBreakpoint]] = {}
        self._function: list[ClientBreakpoint] = []
        self._changed = changed
        GRAPHS.listen(self._on_graph)

    def clear(self) -> None:
        """The client went away: its breakpoints go with it."""
        with self._lock:
            self._source, self._function = {}, []
        STEPPER.set_breaks(OWNER, frozenset())

    def close(self) -> None:
        GRAPHS.unlisten(self._on_graph)
        self.clear()

    def _new_id(self) -> int:
        self._next += 1
        return self._next - 1

    def set_source(self, path: str, wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
        bps = []
        for b in wanted:
            line = b.get("line")
            if type(line) is not int or line < 1:
                raise ValueError(f"a source breakpoint needs a line number >= 1, got {line!r}")
            bp = ClientBreakpoint(self._new_id(), None, "source", path=path, line=line,
                            condition=_text(b, "condition"), hit_condition=_text(b, "hitCondition"),
                            log_message=b.get("logMessage") if isinstance(b.get("logMessage"), str) else None)
            self._resolve(bp)
            bps.append(bp)
        with self._lock:
            self._source[os.path.realpath(path)] = bps
        self._publish()
        return [bp.body() for bp in bps]

    def set_function(self, wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
        bps = []
        for b in wanted:
            bp = ClientBreakpoint(self._new_id(), None, "function", condition=_text(b, "condition"),
                            hit_condition=_text(b, "hitCondition"))
            try:
                bp.selector = sel.parse(b.get("name"))   # type: ignore[arg-type]
            except SelectorError as exc:
                bp.error = str(exc)
            self._resolve(bp)
            bps.append(bp)
        with self._lock:
            self._function = bps
        self._publish()
        return [bp.body() for bp in bps]

    def _resolve(self, bp: ClientBreakpoint) -> None:
        if bp.kind == "source":
            bp.selector = sel.parse(f"line:{_spelling(bp.path)}:{bp.line}")
        if bp.selector is not None:
            bp.sites = frozenset(break_sites(bp.selector))

    def all(self) -> list[ClientBreakpoint]:
        with self._lock:
            return [bp for bps in self._source.values() for bp in bps] + list(self._function)

    def _publish(self) -> None:
        STEPPER.set_breaks(OWNER, frozenset().union(*(bp.sites for bp in self.all())))

    def _on_graph(self, entry: GraphEntry) -> None:
        """A graph with stop points compiled: pending breakpoints may be verified now."""
        newly = []
        for bp in self.all():
            was = bool(bp.sites)
            self._resolve(bp)
            if bp.sites and not was:
                newly.append(bp.body())
        self._publish()
        if newly:
            self._changed(newly)

    def hits(self, site_id: int, namespace: Callable[[], dict[str, Any]]) -> tuple[list[ClientBreakpoint], list[str]]:
        """(breakpoints that stop here, logpoint messages) for a stop at `site_id`."""
        stopping, logs = [], []
        for bp in self.all():
            if site_id not in bp.sites:
                continue
            if bp.condition and not _holds(bp.condition, namespace()):
                continue
            bp.hits += 1
            if not hit_condition_holds(bp.hit_condition, bp.hits):
                continue
            if bp.log_message is not None:
                logs.append(log_text(bp.log_message, namespace()))
            else:
                stopping.append(bp)
        return stopping, logs


def _text(b: dict[str, Any], key: str) -> str:
    value = b.get(key)
    return value if isinstance(value, str) else ""


def _holds(condition: str, namespace: dict[str, Any]) -> bool:
    try:
        return bool(eval(condition, {"__builtins__": __builtins__}, namespace))
    except Exception:
        return True   # a broken condition stops (as debugpy does), so the user sees why


def _spelling(path: str) -> str:
    """The file as the compiled graphs' stack traces spell it (a relative script path, a symlink)."""
    real = os.path.realpath(path)
    for site in SITES.all():
        for frame in site.frames:
            file = frame.file
            if file and file != path and os.path.realpath(file) == real:
                return file
    return path
