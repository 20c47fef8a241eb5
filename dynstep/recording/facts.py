"""What a recording keeps besides its snapshots: compile events, graph plans and run facts.

Frozen dataclasses that cross from the engine to the recording and the front ends:

- `CompileEvent`: a compile, a graph break or a recompile, tied to the user's line;
- `GraphPlan` (rows of `PlanRow`, each with its `PlanSite`s): a graph superstep compiled, with
  every probe and stop point it placed, by node and user line;
- `RunInfo`: versions, platform, argv, when the run started and ended;
- `KernelCount`: the kernels Inductor generated for a probed graph, with and without its probes.

`to_json(x)` and `from_json(cls, obj)` convert them; `from_json` checks every field and raises
`ValueError` saying which one is wrong (a recording's reader lists it as a problem).

    event.where            -> "train.py:12"
    from_json(CompileEvent, {"kind": "graph_break", ...})
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import sys
import typing
from typing import Any, TypeVar

T = TypeVar("T")
EVENT_KINDS = ("compile", "graph_break", "recompile")


@dataclasses.dataclass(frozen=True)
class CompileEvent:
    """A compile, graph break or recompile, where it happened in the user's code."""

    kind: str                 # "compile", "graph_break" or "recompile"
    compile_id: str           # Dynamo's compile id ("0/1"); a recompile carries the new compile's id
    file: str                 # the user's file ("" when torch did not say)
    line: int                 # 0 when unknown
    function: str
    reason: str               # one line: the graph-break type, the guard that failed
    detail: str = ""          # the explanation or the full reason, a few lines
    source_text: str = ""     # the text of the user's line, read when the event was collected
    count: int = 1            # how many times the same event (kind, line, reason) happened
    hints: tuple[str, ...] = ()   # Dynamo's hints for a graph break ("Set torch._dynamo.config...")
    gb_id: str = ""           # the graph-break type's id in Dynamo's registry ("GB0124")
    doc_url: str = ""         # its documentation page

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}" if self.file else "?"

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.kind, self.file, self.line, self.reason)


@dataclasses.dataclass(frozen=True)
class PlanSite:
    """A probe or stop point superstep placed on a node."""

    site: int
    kind: str                 # "value", "grad", "pause" or "step"
    probe: str                # the selector that placed it ("" for step points)
    actions: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class PlanRow:
    """One node of a compiled graph as the user wrote it, with what superstep placed on it."""

    node: str
    target: str
    module: str
    source: str               # "file:line" (the file's base name), as snapshots name it
    path: str                 # the full path of that file ("" when unknown)
    source_text: str
    sites: tuple[PlanSite, ...] = ()


@dataclasses.dataclass(frozen=True)
class GraphPlan:
    """A graph superstep compiled with probes or stop points."""

    graph: str                # "forward[0/0]"
    compile_id: str
    inner: str
    options: tuple[tuple[str, str], ...]   # the options that differ from the defaults, as text
    rows: tuple[PlanRow, ...]


@dataclasses.dataclass(frozen=True)
class KernelCount:
    """What Inductor generated for one partitioned graph of a probed compile: whether probes changed
    its fusion. `unprobed` comes from compiling the same graph without its probes in the same run
    (DYNSTEP_KERNEL_COUNTS=1, and `dynstep doctor`); -1 when that was not done (or not countable)."""

    graph: str                # the Dynamo graph superstep compiled: "forward[0/0]"
    phase: str                # "forward" or "backward" (AOTAutograd's partitioned graph)
    kernels: int              # kernels in the code compiled with the probes (-1: not countable)
    unprobed: int = -1        # kernels of the same graph compiled without probes (-1: not measured)
    fused: int = 0            # summary probes whose statistics the kernels compute
    extern: int = 0           # probe calls handed a materialised value

    @property
    def added(self) -> int | None:
        """Kernels the probes added (None when unmeasured)."""
        return self.kernels - self.unprobed if self.kernels >= 0 and self.unprobed >= 0 else None


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """The run a recording came from."""

    dynstep: str
    torch: str
    python: str
    platform: str
    argv: tuple[str, ...]
    started: str              # ISO 8601, local time with offset
    ended: str = ""
    cuda: str = ""            # torch.version.cuda ("" on a CPU build)
    devices: tuple[str, ...] = ()   # CUDA devices in use when the recording closed
    session: str = ""
    dropped: int = 0          # hits the session's rings dropped

    @classmethod
    def now(cls, session: str = "") -> "RunInfo":
        import torch

        from .. import __version__

        return cls(dynstep=__version__, torch=torch.__version__, python=platform.python_version(),
                   platform=platform.platform(), argv=tuple(sys.argv), started=timestamp(),
                   cuda=torch.version.cuda or "", session=session)

    def closed(self, dropped: int = 0) -> "RunInfo":
        """The same run, ended now (with the CUDA devices that were in use)."""
        import torch

        devices: tuple[str, ...] = ()
        if torch.cuda.is_initialized():
            devices = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        return dataclasses.replace(self, ended=timestamp(), devices=devices, dropped=dropped)


def timestamp() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


# -- JSON ----------------------------------------------------------------------------------------

def to_json(value: Any) -> Any:
    """A record (or a tuple of them) as JSON-ready lists and dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def from_json(cls: type[T], raw: Any) -> T:
    """`cls` from its JSON form, every field checked (ValueError naming the field otherwise).

    Fields with defaults may be missing; unknown keys are ignored (a newer dynstep may add some)."""
    if not isinstance(raw, dict):
        raise ValueError(f"expected a JSON object for {cls.__name__}, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):   # type: ignore[arg-type]
        if f.name not in raw:
            if f.default is dataclasses.MISSING:
                raise ValueError(f"{cls.__name__}: field {f.name!r} is missing")
            continue
        values[f.name] = _decode(hints[f.name], raw[f.name], f"{cls.__name__}.{f.name}")
    made = cls(**values)
    if isinstance(made, CompileEvent) and made.kind not in EVENT_KINDS:
        raise ValueError(f"CompileEvent.kind must be one of {list(EVENT_KINDS)}, got {made.kind!r}")
    return made


def _decode(kind: Any, raw: Any, where: str) -> Any:
    origin = typing.get_origin(kind)
    if origin is tuple:
        args = typing.get_args(kind)
        if not isinstance(raw, list):
            raise ValueError(f"{where} must be a list, got {raw!r:.80}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], item, where) for item in raw)
        if len(raw) != len(args):
            raise ValueError(f"{where} must have {len(args)} items, got {raw!r:.80}")
        return tuple(_decode(a, item, where) for a, item in zip(args, raw))
    if dataclasses.is_dataclass(kind):
        return from_json(kind, raw)
    if kind is int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError(f"{where} must be an integer, got {raw!r:.80}")
        return raw
    if kind is str:
        if not isinstance(raw, str):
            raise ValueError(f"{where} must be a string, got {raw!r:.80}")
        return raw
    if kind is float:   # JSON has no NaN: non-finite numbers are written as "nan", "inf", "-inf"
        if isinstance(raw, str) and raw in ("nan", "inf", "-inf"):
            return float(raw)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ValueError(f"{where} must be a number, got {raw!r:.80}")
        return float(raw)
    raise TypeError(f"{where}: no JSON decoding for {kind!r}")   # a programming error, not bad input


def dedupe(events: list[CompileEvent]) -> tuple[CompileEvent, ...]:
    """Each (kind, file, line, reason) once, in first-seen order, its `count` summed."""
    seen: dict[tuple, CompileEvent] = {}
    for e in events:
        first = seen.get(e.key)
        seen[e.key] = e if first is None else dataclasses.replace(first, count=first.count + e.count)
    return tuple(seen.values())
