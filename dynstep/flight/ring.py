"""The flight recorder's rings: the statistics of one probed value (or gradient) over the last steps.

Two levels, both bounded. While all is well a hit stays where the probe's publish step put it: the
native ring of its site (csrc/probe_state.h, `capacity` = K + 1 slots of one `Entry` each), written by
the native kernel (or, with the statistics fused into Inductor's kernels, by their publish step) with
no Python and no copy to the host. Hits reach Python only when the native rings are drained — at a
dump, when a session is read, or when a graph called several times per step would overflow its native
ring — and are then kept here as compact tuples, up to K + 1 steps' worth.

Bytes per probed value per step (one call per step): `NATIVE_SLOT_BYTES` natively, plus up to
`PYTHON_HIT_BYTES` once drained (measured: tests/flight/test_ring_memory.py).

    ring = SiteRing(site, steps=65)
    ring.add(snapshot)           # a hit handed to the site's sink (the flight recorder's)
    for hit in ring.hits: hit.seq, hit.stats
"""

from __future__ import annotations

import collections
import sys
from typing import NamedTuple

from ..core.records import Snapshot, Stats
from ..core.sites import Site

# sizeof(Entry) in csrc/probe_state.h (160 on x86-64) + its shape vector's reserved 8 dims and header
NATIVE_SLOT_BYTES = 256
# a drained hit here: the tuple, its Stats and the floats they hold (shape, dtype, device shared)
PYTHON_HIT_BYTES = 560


class Hit(NamedTuple):
    seq: int
    call: int
    stats: Stats
    shape: tuple[int, ...]
    dtype: str
    device: str


class SiteRing:
    """The last hits of one site, at most `slots` of them (K + 1 steps x calls per step)."""

    __slots__ = ("site", "hits", "_shape")

    def __init__(self, site: Site, slots: int) -> None:
        self.site = site
        self.hits: collections.deque[Hit] = collections.deque(maxlen=max(1, slots))
        self._shape: tuple[int, ...] = ()

    def add(self, snap: Snapshot) -> None:
        shape = snap.shape if snap.shape != self._shape else self._shape   # one tuple per site while it holds
        self._shape = shape
        self.hits.append(Hit(snap.seq, snap.call, snap.stats, shape, sys.intern(snap.dtype), sys.intern(snap.device)))

    def grow(self, slots: int) -> None:
        """Keep more hits (a graph called more often per step than planned)."""
        if slots > (self.hits.maxlen or 0):
            self.hits = collections.deque(self.hits, maxlen=slots)

    @property
    def slots(self) -> int:
        return self.hits.maxlen or 0
