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


def test_a_hit_drained_raw_equals_the_same_hit_delivered_as_a_snapshot():
    """The drain hands a flight site's hits over as the native side gives them (probe.runtime.RawAdd): the
    ring must keep exactly what the Snapshot path keeps, and one shape tuple per site while it holds."""
    site = SITES.add(kind="value", actions=("summary",), probe="*", node="n", target="t", module="m", source="s:1",
                     source_text="", graph="g", capacity=1, owner="flight")
    by_snapshot, raw = SiteRing(site, 4), SiteRing(site, 4)
    numbers = (-1.0, 2.0, 0.5, 0.25, 2.0, 1, 2, 10)
    by_snapshot.add(Snapshot(kind="value", probe="*", node="n", target="t", module="m", source="s:1", graph="g",
                             call=3, shape=(2, 5), dtype="float32", device="cpu", stats=Stats(*numbers),
                             site=site.id, seq=7))
    raw.add_raw(7, 3, numbers, [2, 5], "float32", "cpu")
    raw.add_raw(8, 4, numbers, [2, 5], "float32", "cpu")
    assert raw.hits[0] == by_snapshot.hits[0]
    assert raw.hits[0].stats == Stats(*numbers) and (raw.hits[0].nan, raw.hits[0].inf) == (1, 2)
    assert raw.hits[1].shape is raw.hits[0].shape == (2, 5)


def test_the_drain_gives_an_owned_sites_summary_hits_to_its_raw_add_and_the_rest_as_snapshots(monkeypatch):
    from dynstep.probe import runtime

    owned = SITES.add(kind="value", actions=("summary",), probe="*", node="a", target="t", module="m",
                      source="s:1", source_text="", graph="g", capacity=1, owner="flight")
    plain = SITES.add(kind="value", actions=("summary",), probe="*", node="b", target="t", module="m",
                      source="s:2", source_text="", graph="g", capacity=1, owner="flight")
    raw_hits, snaps = [], []

    class Sink:
        def add(self, snap):
            snaps.append(snap)

        def count_dropped(self, ring, memory):
            pass

    numbers = (0.0, 1.0, 0.5, 0.5, 1.0, 0, 0, 4)
    entries = [(owned.id, 11, 0, 1, numbers, [4], "float32", None, "cpu"),
               (plain.id, 12, 0, 1, numbers, [4], "float32", None, "cpu")]

    class Native:
        def drain(self, site_id):
            return entries, {}

    monkeypatch.setattr(runtime.RUNTIME, "native", Native())
    try:
        runtime.set_sink(owned.id, Sink(), lambda *hit: raw_hits.append(hit))
        runtime.set_sink(plain.id, Sink())
        assert rings.drain_native() == 2
    finally:
        runtime.close(owned.id)
        runtime.close(plain.id)
    assert raw_hits == [(11, 0, numbers, [4], "float32", "cpu")]
    assert [(s.site, s.seq, s.shape, s.stats) for s in snaps] == [(plain.id, 12, (4,), Stats(*numbers))]
    assert owned.id not in runtime.RUNTIME.raw_adds          # closing a site forgets its raw add too
