"""The records that cross every layer: `Stats`, `Snapshot` (what a probe produces) and `GraphRow`
(one line of a compiled graph's listing). Frozen dataclasses, no behaviour beyond conversion.

    snap.node, snap.source, snap.module, snap.shape, snap.stats["absmax"], snap.tensor
    dtype_name(torch.bfloat16)   -> "bfloat16" (how a Snapshot names its dtype)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

STAT_FIELDS = ("min", "max", "mean", "std", "absmax", "nan", "inf", "count")


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype as dynstep names it everywhere (`Snapshot.dtype`, the REPL, DAP, the diff): "float32"."""
    return str(dtype).removeprefix("torch.")


@dataclasses.dataclass(frozen=True)
class Stats:
    """Summary of one tensor. min/max/mean/std/absmax are over finite values; nan/inf are counts."""

    min: float = math.nan
    max: float = math.nan
    mean: float = math.nan
    std: float = math.nan
    absmax: float = math.nan
    nan: int = 0
    inf: int = 0
    count: int = 0

    def __getitem__(self, key: str) -> float | int:
        if key not in STAT_FIELDS:
            raise KeyError(f"{key!r}: stats fields are {list(STAT_FIELDS)}")
        return getattr(self, key)

    def keys(self) -> tuple[str, ...]:
        return STAT_FIELDS

    def to_dict(self) -> dict[str, float | int]:
        return {k: getattr(self, k) for k in STAT_FIELDS}

    @property
    def finite(self) -> bool:
        return self.nan == 0 and self.inf == 0


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One probe hit: where it was, what the value looked like, and (for `record`) a CPU copy."""

    kind: str            # "value" or "grad"
    probe: str           # the selector that placed the probe
    node: str            # FX node name in the graph the probe sits in
    target: str          # the op the node calls
    module: str          # module path as the user writes it ("" at the top level)
    source: str          # "file:line" of the user's code
    graph: str           # "<function>[<compile id>]", stable across calls
    call: int            # how many times this probe fired before (invocation index)
    shape: tuple[int, ...]
    dtype: str
    device: str
    stats: Stats
    tensor: torch.Tensor | None = None
    site: int = -1
    seq: int = 0         # global order of hits in this process
    source_text: str = ""
    rank: int = 0        # the rank of a distributed job that recorded it (0 in one process)
    world_size: int = 1
    identity: str = ""   # the stable node identity (dynstep.graph.identity; docs/compare.md)
    step: int = -1       # the training step of a flight recorder's dump (dynstep.flight); -1 elsewhere
    modules: tuple[str, ...] = ()   # every module whose call returns the value (a `module:` probe), outermost first

    @property
    def hit(self) -> tuple:
        """Which hit this is, in its recording (the same for a copy without its tensor)."""
        return (self.rank, self.seq, self.site, self.call, self.kind, self.graph, self.node)

    @property
    def probe_name(self) -> str:  # torch-cudagraph-debug's TensorSnapshot name
        return self.probe

    @property
    def replay_index(self) -> int:  # torch-cudagraph-debug's TensorSnapshot name
        return self.call

    def meta(self) -> dict[str, Any]:
        """Everything but the tensor, JSON-ready."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "tensor"}
        out["stats"] = self.stats.to_dict()
        out["shape"] = list(self.shape)
        out["modules"] = list(self.modules)
        return out

    @classmethod
    def from_meta(cls, meta: dict[str, Any], tensor: torch.Tensor | None) -> "Snapshot":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in meta.items() if k in known}
        values["stats"] = Stats(**{k: v for k, v in meta["stats"].items() if k in STAT_FIELDS})
        values["shape"] = tuple(meta["shape"])
        values["modules"] = tuple(meta.get("modules") or ())
        values["tensor"] = tensor
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class GraphRow:
    """One line of a graph listing: a node, what it calls, where it came from, its stop site."""

    node: str
    target: str
    module: str
    source: str
    site: int | None
