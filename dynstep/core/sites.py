"""Probe sites: what each `dynstep::probe(x, site)` call in a compiled graph stands for.

The op carries only an int; the registry maps it to a frozen `Site` with the node, op, module,
source line, graph and actions. Sites live for the process (graphs may be replayed at any time).

    site = SITES.add(kind="value", probe="module:blocks.*", node="add_3", ...)
    SITES.get(site.id)
    site.frames[-1].file, site.frames[-1].line      # the user's innermost frame (a `UserLine`)
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class UserLine:
    """One frame of the user's code a node came from: the file as the stack trace spells it, the line."""

    file: str
    line: int

    @classmethod
    def parse(cls, text: str) -> "UserLine":
        """From ``"path:line"`` (how sites named frames before; a line that is no number is 0)."""
        file, _, line = text.rpartition(":")
        return cls(file, int(line) if line.isdigit() else 0)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def rpartition(self, sep: str) -> tuple[str, str, str]:
        """``str(self).rpartition(sep)``: for step/commands.py's `where`, which still splits the text (a file
        another branch of this wave edits; issue 27 item 9: remove once it reads `.file` and `.line`)."""
        return str(self).rpartition(sep)


@dataclasses.dataclass(frozen=True)
class HandConfig:
    """What a hand-placed probe (dynstep.probe.api.TensorProbe) adds to a site."""

    every: int = 1                   # print every n-th hit
    max_items: int = 8               # values shown per print
    when: str = "always"             # "capture": act only while a CUDA stream is capturing
    non_contiguous: str = "copy"     # "error": a strided input raises ValueError
    expected: Any = None             # CPU tensor for the sticky compare (None: no compare)
    rtol: float = 1e-5
    atol: float = 1e-8
    equal_nan: bool = False
    check_finite: bool = False       # sticky non-finite flag (CheckAction without expected)


@dataclasses.dataclass(frozen=True)
class Site:
    id: int
    kind: str                   # "value", "grad", or "pause" (a stepper stop point)
    probe: str                  # selector text that placed it
    node: str
    target: str
    module: str
    source: str                 # "file:line"
    source_text: str
    graph: str
    actions: tuple[str, ...]
    capacity: int               # ring capacity for `record`
    nan_mode: str | None = None  # "raise" | "stop" | "warn" when the nan action is on
    inputs: tuple[str, ...] = ()  # FX names of the node's tensor inputs (pause sites)
    input_names: tuple[str, ...] = ()  # the caller's variable behind each graph input among them ("" if none)
    user_name: str = ""         # the user's variable the node's value is assigned to, if known
    frames: tuple[UserLine, ...] = ()  # every user frame, outermost first ("path:line" strings are parsed)
    hand: HandConfig | None = None   # set for hand-placed probes only
    identity: str = ""          # the node's stable identity (dynstep.graph.identity), "" if not computed
    owner: str = ""             # who collects its hits: "" the sessions; "flight" the flight recorder (own sink,
                                # its ring of `capacity` stats, a non-finite hit handed over, not raised)
    modules: tuple[str, ...] = ()    # every module whose call returns the value, outermost first (module:)

    def __post_init__(self) -> None:
        if any(isinstance(f, str) for f in self.frames):   # a pass that still writes "path:line"
            object.__setattr__(self, "frames", tuple(UserLine.parse(f) if isinstance(f, str) else f
                                                     for f in self.frames))


class SiteRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sites: dict[int, Site] = {}
        self._ids = itertools.count(1)
        self._listeners: list[Callable[[Site], None]] = []

    def add(self, **fields) -> Site:
        with self._lock:
            site = Site(id=next(self._ids), **fields)
            self._sites[site.id] = site
            listeners = list(self._listeners)
        for listener in listeners:  # the native registry mirrors every site (dynstep/probe/rings.py)
            listener(site)
        return site

    def listen(self, listener: Callable[[Site], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def get(self, site_id: int) -> Site:
        try:
            return self._sites[site_id]
        except KeyError:
            raise KeyError(f"dynstep probe site {site_id} is not registered in this process; "
                           "was the graph compiled in another process?") from None

    def all(self) -> list[Site]:
        return list(self._sites.values())


SITES = SiteRegistry()
