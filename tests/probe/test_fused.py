"""dynstep::publish, the op that carries fused summary statistics (dynstep/probe/fused.py,
csrc/probe_publish.cpp): its native and Python kernels give the Snapshot the probe op gives for the same
value, through the direct entry Inductor's wrapper calls and through the dispatcher, and opcheck passes.

The native half is skipped on a dispatcher check (no CPU kernel for dynstep::publish), never on an import.
"""

from __future__ import annotations

import math

import pytest
import torch

import dynstep
from dynstep import _compat
from dynstep.core.sites import SITES
from dynstep.ops import native as native_mod
from dynstep.ops import schema as ops
from dynstep.probe import fastpath, fused
from dynstep.probe import registration as kernel

kernel.ensure()
native_only = pytest.mark.skipif(not _compat.has_kernel("dynstep::publish", "CPU"),
                                 reason=f"no native CPU kernel for dynstep::publish ({native_mod.status().reason})")


def summary_site():
    return SITES.add(kind="value", probe="test:publish", node="n", target="t", module="", source="test_fused.py:1",
                     source_text="", graph="g", actions=("summary",), capacity=8)


def parts_of(x: torch.Tensor) -> list[torch.Tensor]:
    """What Inductor's kernels compute for a value (backends/stats_pass.py), computed here in eager."""
    v = x.to(torch.uint8) if x.dtype == torch.bool else x
    if not v.is_floating_point():
        wide = v.double()
        return [wide.sum(), (wide * wide).sum(), v.amin(), v.amax()]
    finite = v.abs() < math.inf
    wide = torch.where(finite, v, 0).double()
    return [wide.sum(), (wide * wide).sum(), torch.where(finite, v, math.inf).amin(),
            torch.where(finite, v, -math.inf).amax(), (v != v).sum(dtype=torch.int32), (~finite).sum(dtype=torch.int32)]


VALUES = {
    "float32": lambda: torch.randn(6, 7) * 2 + 1,
    "float32 specials": lambda: torch.tensor([1.5, math.nan, -math.inf, 2.0, math.inf, -3.0]),
    "all non-finite": lambda: torch.tensor([math.nan, math.inf]),
    "float16": lambda: (torch.randn(40) * 5).half(),
    "bfloat16": lambda: torch.randn(3, 11).bfloat16(),
    "float64 0-dim": lambda: torch.tensor(-2.25, dtype=torch.float64),
    "int64": lambda: torch.randint(-10**12, 10**12, (17,)),
    "int8": lambda: torch.randint(-128, 127, (5, 5), dtype=torch.int8),
    "bool": lambda: torch.rand(33) > 0.4,
}


def publish_and_read(entry, x: torch.Tensor, site_id: int):
    code = fused.DTYPE_CODES[x.dtype]
    with dynstep.session() as s:
        entry(parts_of(x), [site_id], list(x.shape), [x.dim()], [code])
    (snap,) = s.records("*")
    return snap


def probe_and_read(x: torch.Tensor, site_id: int):
    with dynstep.session() as s:
        torch.ops.dynstep.probe(x, site_id)
    (snap,) = s.records("*")
    return snap


def same(a, b, rel=1e-12) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b or (isinstance(a, float) and a == pytest.approx(b, rel=rel, abs=1e-300))


@pytest.mark.parametrize("entry", ["python kernel", pytest.param("native direct", marks=native_only),
                                   pytest.param("dispatcher", marks=native_only)])
@pytest.mark.parametrize("name", list(VALUES))
def test_publish_gives_the_snapshot_the_probe_gives(entry, name):
    x = VALUES[name]()
    call = {"python kernel": fused.on_publish, "native direct": native_mod.get().publish if native_mod.get() else None,
            "dispatcher": ops.publish}[entry]
    got = publish_and_read(call, x, summary_site().id)
    want = probe_and_read(x, summary_site().id)
    assert (got.shape, got.dtype, got.device, got.call, got.tensor) == (want.shape, want.dtype, want.device, 0, None)
    assert all(same(got.stats[k], want.stats[k]) for k in got.stats.keys()), (got.stats, want.stats)


@native_only
def test_one_publish_is_one_hit_per_site_in_order_and_counts_calls():
    sites = [summary_site().id for _ in range(3)]
    xs = [torch.randn(4), torch.arange(6).reshape(2, 3), torch.rand(5) > 0.5]
    stats = [p for x in xs for p in parts_of(x)]
    args = (stats, sites, [s for x in xs for s in x.shape], [x.dim() for x in xs],
            [fused.DTYPE_CODES[x.dtype] for x in xs])
    with dynstep.session() as s:
        fastpath.publish(*args)
        fastpath.publish(*args)
    hits = sorted(s.records("*"), key=lambda r: r.seq)
    assert [(h.site, h.call, h.shape) for h in hits] == [(sites[0], 0, (4,)), (sites[1], 0, (2, 3)), (sites[2], 0, (5,)),
                                                       (sites[0], 1, (4,)), (sites[1], 1, (2, 3)), (sites[2], 1, (5,))]
    assert [h.dtype for h in hits[:3]] == ["float32", "int64", "bool"]


@native_only
def test_mismatched_publish_arguments_are_a_clear_error():
    site_id = summary_site().id
    with pytest.raises(ValueError, match="do not match"):
        native_mod.get().publish([torch.tensor(1.0)], [site_id], [3], [1], [6])
    with pytest.raises(TypeError, match="5 arguments"):
        native_mod.get().publish([], [])


def test_closed_sites_publish_nothing():
    from dynstep.probe import rings

    site_id = summary_site().id
    rings.close_site(site_id)
    x = torch.randn(3)
    with dynstep.session() as s:
        fused.on_publish(parts_of(x), [site_id], [3], [1], [6])
        fastpath.publish(parts_of(x), [site_id], [3], [1], [6])
    assert s.records("*") == []


def test_publish_op_passes_opcheck_and_is_an_ordered_effect():
    site_id = summary_site().id
    x = torch.randn(5, 2)
    torch.library.opcheck(ops.publish, (parts_of(x), [site_id], [5, 2], [2], [6]))
    assert _compat.effect_of(ops.publish) is not None
    assert torch.Tag.cudagraph_unsafe not in ops.publish.tags


def test_stats_of_parts_folds_like_the_probe_kernel():
    st = fused.stats_of_parts([6.0, 14.0, 1.0, 3.0, 0, 0], 3, floating=True)   # values 1, 2, 3
    assert (st.min, st.max, st.mean, st.std, st.absmax, st.count) == (1.0, 3.0, 2.0, 1.0, 3.0, 3)
    one = fused.stats_of_parts([-4.0, 16.0, -4.0, -4.0], 1, floating=False)
    assert one.mean == -4.0 and math.isnan(one.std) and one.absmax == 4.0
    none = fused.stats_of_parts([0.0, 0.0, math.inf, -math.inf, 2, 3], 3, floating=True)
    assert (none.nan, none.inf, none.count) == (2, 1, 0) and math.isnan(none.min)
