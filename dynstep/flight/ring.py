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
# a drained hit here: the tuple, its numbers' tuple and the floats they hold (shape, dtype, device shared)
PYTHON_HIT_BYTES = 560


class Hit(NamedTuple):
    """One drained hit. `numbers` are its statistics in `Stats` field order (min, max, mean, std, absmax,
    nan, inf, count) as the native drain hands them over: no `Stats` object per hit until one is asked for."""

    seq: int
    call: int
    numbers: tuple
    shape: tuple[int, ...]
    dtype: str
    device: str

    @property
    def stats(self) -> Stats:
        return Stats(*self.numbers)

    @property
    def absmax(self) -> float:
        return self.numbers[4]

    @property
    def nan(self) -> int:
        return self.numbers[5]

    @property
    def inf(self) -> int:
        return self.numbers[6]


class SiteRing:
    """The last hits of one site, at most `slots` of them (K + 1 steps x calls per step)."""

    __slots__ = ("site", "hits", "_shape")

    def __init__(self, site: Site, slots: int) -> None:
        self.site = site
        self.hits: collections.deque[Hit] = collections.deque(maxlen=max(1, slots))
        self._shape: tuple[int, ...] = ()

    def add(self, snap: Snapshot) -> None:
        st = snap.stats
        self.add_raw(snap.seq, snap.call, (st.min, st.max, st.mean, st.std, st.absmax, st.nan, st.inf, st.count),
                     snap.shape, snap.dtype, snap.device)

    def add_raw(self, seq: int, call: int, numbers: tuple, shape, dtype: str, device: str) -> None:
        """A hit as the native drain hands it over (`numbers` in `Stats` field order, `shape` any sequence)."""
        held = self._shape
        shape = shape if type(shape) is tuple else tuple(shape)
        if shape != held:
            held = self._shape = shape   # one tuple per site while its shape holds
        self.hits.append(Hit(seq, call, numbers, held, sys.intern(dtype), sys.intern(device)))

    def grow(self, slots: int) -> None:
        """Keep more hits (a graph called more often per step than planned)."""
        if slots > (self.hits.maxlen or 0):
            self.hits = collections.deque(self.hits, maxlen=slots)

    @property
    def slots(self) -> int:
        return self.hits.maxlen or 0
