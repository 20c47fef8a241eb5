"""A flight dump's records.jsonl is encoded natively (csrc/flight_lines.cpp) when the native kernel is
loaded: it must write the very bytes the Python encoder writes (writer._python_lines), floats spelled as
Python's repr spells them and non-finite ones as "nan"/"inf"/"-inf", and fall back to Python for numbers
it cannot take."""

from __future__ import annotations

import json
import math
import random
import struct
import sys

import pytest

from dynstep.core.sites import SITES
from dynstep.flight import writer
from dynstep.flight.ring import SiteRing
from dynstep.ops import native as native_build
from dynstep.probe import registration, rings

EDGES = [0.0, -0.0, 0.1, -0.1, 1.0, 5.0, 0.5, 1e-4, 1.5e-4, 9.999999e-5, 1e-5, 1.5e-5, 123456.75, 1e15, 9.5e15,
         1e16, 1.5e16, 1e22, 1e100, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 1 / 3, -2 / 3,
         0.10000000149011612, 3.4028234663852886e38, 1.1754943508222875e-38, 12345678901234567.0, 100.0,
         1234567890123456.0, 0.001, 0.00012345678901234567]


@pytest.fixture
def native():
    registration.ensure()        # what the first probe does: load the native kernel and attach it
    module = rings.runtime.RUNTIME.native
    if module is None:
        pytest.skip(f"no native kernel here ({native_build.status().reason}): only the Python encoder runs")
    return module


def test_a_float_is_spelled_as_python_spells_it(native):
    rnd = random.Random(0)
    samples = EDGES + [-v for v in EDGES] + [rnd.uniform(-1e3, 1e3) for _ in range(2000)]
    samples += [struct.unpack("d", struct.pack("Q", rnd.getrandbits(64)))[0] for _ in range(5000)]
    samples += [float(struct.unpack("f", struct.pack("I", rnd.getrandbits(32)))[0]) for _ in range(5000)]
    finite = [v for v in samples if math.isfinite(v)]
    assert len(finite) > 10_000
    wrong = [(v, native.float_repr(v)) for v in finite if native.float_repr(v) != repr(v)]
    assert not wrong, wrong[:5]
    assert [native.float_repr(v) for v in (math.nan, math.inf, -math.inf)] == ['"nan"', '"inf"', '"-inf"']


def _hits(n_sites=5, steps=4, nonfinite=True):
    sites = [SITES.add(kind="value" if i % 2 else "grad", actions=("summary",), probe="*", node=f"n{i}",
                       target="aten.mm.default", module=f"h.{i}.mlp", source=f"m\u00e9.py:{i}",
                       source_text='x = "quoted" \\ \u00fc', graph="forward[0/0]", capacity=1, owner="flight")
             for i in range(n_sites)]
    rnd = random.Random(1)
    hits, seq = [], 0
    for step in range(steps):
        for site in sites:
            seq += 1
            lo, hi = -rnd.random() * 10 ** rnd.randint(-8, 20), rnd.random() * 10 ** rnd.randint(-8, 20)
            numbers = (lo, hi, rnd.uniform(lo, hi), rnd.random(), max(-lo, hi), 0, 0, 4096)
            if nonfinite and seq % 7 == 0:
                numbers = (math.nan, math.inf, -math.inf, math.nan, math.inf, 3, 2, 4091)
            ring = SiteRing(site, 2)
            ring.add_raw(seq, step * 2, numbers, [8, step + 1], "float32", "cpu")
            hits.append((site, ring.hits[0], step))
    return hits


def test_native_lines_are_the_python_lines_byte_for_byte(native):
    hits = _hits()
    lines = writer._lines(hits)
    assert len(lines) == 1                       # one text from the native encoder, not a line per hit
    text = lines[0]
    assert text == "".join(writer._python_lines(*writer._columns(hits)))
    for line in text.splitlines():
        json.loads(line)


def test_numbers_the_native_encoder_cannot_take_fall_back_to_python(native):
    hits = _hits(n_sites=2, steps=2, nonfinite=False)
    site, hit, step = hits[0]
    hits[0] = (site, hit._replace(numbers=(*hit.numbers[:5], 0.5, 0, 4096)), step)   # a float NaN count
    assert rings.flight_lines(["{"], [0], [0, 1, 2, 0.5, 0, 4096], [0.0] * 5) is None
    assert writer._lines(hits) == writer._python_lines(*writer._columns(hits))


def test_bad_arguments_to_the_native_encoder_raise_instead_of_reading_past_them(native):
    with pytest.raises(RuntimeError, match="6 ints and 5 floats per hit"):
        native.flight_lines(["{"], [0], [1, 2, 3], [0.0] * 5)
    with pytest.raises(RuntimeError, match="out of range"):
        native.flight_lines(["{"], [1], [0] * 6, [0.0] * 5)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
