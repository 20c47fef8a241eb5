"""The flight recorder's rings are bounded: K + 1 hits per probed value natively (never the 1024 of a
session's summary ring), K + 1 steps' worth once drained, and a drained hit costs at most
`PYTHON_HIT_BYTES` (measured here with tracemalloc)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

import dynstep
from dynstep.core.records import Snapshot, Stats
from dynstep.core.sites import SITES
from dynstep.flight.ring import PYTHON_HIT_BYTES, SiteRing
from dynstep.probe import rings

from .loops import tiny

K = 3


def test_native_and_python_rings_hold_k_plus_one_steps(dumps):
    tiny(steps=3 * K + 2, flight={"steps": K, "path": str(dumps)})
    recorder = dynstep.flight.current()
    native = rings.runtime.RUNTIME.native
    if native is None:
        pytest.skip("no native kernel (DYNSTEP_NATIVE=0 or no compiler): the Python kernel keeps no ring")
    sample = list(recorder.rings)[:20]
    for site_id in sample:   # straight from the native ring, before anything drains it into Python
        entries, _ = native.drain(site_id)
        assert len(entries) == K + 1, SITES.get(site_id)
        for sid, seq, call, thread, numbers, shape, dtype, tensor, device in entries:
            recorder.rings[sid].add(Snapshot(kind="value", probe="", node="", target="", module="", source="",
                                             graph="", call=call, shape=tuple(shape), dtype=dtype, device=device,
                                             stats=Stats(*numbers), site=sid, seq=seq))
    rings.drain_native()
    assert all(len(r.hits) <= K + 1 for r in recorder.rings.values())
    held, per_step = recorder.memory()
    assert held == len(recorder.rings) * (K + 1) * per_step


def test_a_drained_hit_costs_at_most_python_hit_bytes():
    """What a drained hit leaves behind: its Stats (made by the drain) and the ring's tuple; the Snapshot
    around them is dropped."""
    site = SITES.add(kind="value", actions=("summary",), probe="*", node="n", target="t", module="m", source="s:1",
                     source_text="", graph="g", capacity=1, owner="flight")
    ring = SiteRing(site, 5000)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(5000):
        numbers = (-1.0 - i, 1.0 + i, 0.5 + i, 1.5 + i, 2.5 + i, 0, 0, 4096 + i)
        ring.add(Snapshot(kind="value", probe="*", node="n", target="t", module="m", source="s:1", graph="g", call=i,
                          shape=(8, 16, 32), dtype="float32", device="cpu", stats=Stats(*numbers), site=site.id,
                          seq=i))
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(ring.hits) == 5000
    assert retained / 5000 <= PYTHON_HIT_BYTES
