"""The native CPU kernel (csrc/probe_cpu.cpp) against the Python kernel, action by action and
dtype by dtype, plus opcheck, ring reuse, the record memory cap and thread routing.

Skipped on a dispatcher check (no CPU kernel registered for dynstep::probe), never on an import.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading

import pytest
import torch

import dynstep
from dynstep import _compat
from dynstep.ops import native as native_mod
from dynstep.ops import schema as ops
from dynstep.probe import fastpath, registration, rings, runtime
from dynstep.core.errors import NonFiniteError
from dynstep.core.events import ProbePrinted, use_sink
from dynstep.core.sites import SITES

registration.ensure()   # registers the probe's kernels, the native one when it builds
pytestmark = pytest.mark.skipif(not _compat.has_kernel("dynstep::probe", "CPU"),
                                reason="no native CPU kernel registered for dynstep::probe "
                                       f"({native_mod.status().reason})")

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]


def make(dtype: torch.dtype, layout: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash((str(dtype), layout)) % 1000)
    if layout == "empty":
        return torch.empty(0, 3, dtype=dtype)
    # "large": past the per-site budget for deferred summaries (csrc/probe_cpu.cpp), so its stats
    # are computed at hit time; the small ones are computed when the ring is drained
    shape = () if layout == "0-dim" else (300, 300) if layout == "large" else (7, 9)
    if dtype.is_floating_point:
        x = (torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 1).to(dtype)
        if layout != "0-dim":
            x[1, 2], x[3, 4], x[5, 0] = math.nan, math.inf, -math.inf
    elif dtype == torch.bool:
        x = torch.rand(shape, generator=g) > 0.5
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g, dtype=dtype)
    if layout == "non-contiguous":
        x = x.t()[::2]
        assert not x.is_contiguous()
    return x


def site(actions: tuple[str, ...], nan_mode: str | None = None, capacity: int = 4):
    return SITES.add(kind="value", probe=f"test:{'+'.join(actions)}", node="n", target="t", module="",
                     source="test_native.py:1", source_text="", graph="g", actions=actions,
                     capacity=capacity, nan_mode=nan_mode)


def run_native(x: torch.Tensor, actions, **kw):
    s = site(actions, **kw)
    events: list[ProbePrinted] = []
    with use_sink(events.append), dynstep.session() as sess:
        torch.ops.dynstep.probe(x, s.id)   # through the dispatcher
        fastpath.probe(x, s.id)            # the direct entry Inductor's wrapper calls
    return sess.records(), events


def run_python(x: torch.Tensor, actions, **kw):
    s = site(actions, **kw)
    events: list[ProbePrinted] = []
    with use_sink(events.append), dynstep.session() as sess:
        runtime.on_probe(x, s.id)  # the Python kernel, called directly
        runtime.on_probe(x, s.id)
    return sess.records(), events


def assert_same_stats(a, b) -> None:
    for f in ("min", "max", "absmax", "nan", "inf", "count"):
        va, vb = a[f], b[f]
        assert (math.isnan(va) and math.isnan(vb)) or va == vb, (f, va, vb)
    for f in ("mean", "std"):
        va, vb = a[f], b[f]
        assert (math.isnan(va) and math.isnan(vb)) or math.isclose(va, vb, rel_tol=1e-9, abs_tol=1e-12), (f, va, vb)


@pytest.mark.parametrize("layout", ["contiguous", "non-contiguous", "empty", "0-dim", "large"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("actions", [("summary",), ("record",), ("print",), ("summary", "record", "print")],
                         ids="+".join)
def test_native_matches_python(dtype, layout, actions):
    x = make(dtype, layout)
    nat, nat_ev = run_native(x, actions)
    py, py_ev = run_python(x, actions)
    assert len(nat) == len(py)
    assert len(nat_ev) == len(py_ev) == (2 if "print" in actions else 0)
    for a, b in list(zip(nat, py)) + [(e.snapshot, f.snapshot) for e, f in zip(nat_ev, py_ev)]:
        assert (a.call, a.shape, a.dtype, a.device) == (b.call, b.shape, b.dtype, b.device)
        assert_same_stats(a.stats, b.stats)
        assert (a.tensor is None) == (b.tensor is None)
        if a.tensor is not None:
            assert a.tensor.dtype == b.tensor.dtype and torch.equal(a.tensor.nan_to_num(), b.tensor.nan_to_num())
            assert x.numel() == 0 or a.tensor.data_ptr() != x.data_ptr()  # a copy, not a view
    assert [s.call for s in nat] == list(range(len(nat)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_nan_action_raises_identically(dtype):
    x = torch.tensor([1.0, math.nan, math.inf], dtype=dtype)
    messages = []
    for runner in (run_native, run_python):
        with pytest.raises(NonFiniteError) as info:
            runner(x, ("summary", "nan"))
        messages.append((str(info.value).split("[graph")[0], info.value.nan, info.value.inf))
    assert messages[0] == messages[1]
    assert messages[0][1:] == (1, 1)


def test_nan_warn_mode_delivers_like_python():
    x = torch.tensor([1.0, math.nan])
    with pytest.warns(RuntimeWarning, match="1 NaN"):
        nat, _ = run_native(x, ("summary", "nan"), nan_mode="warn")
    with pytest.warns(RuntimeWarning, match="1 NaN"):
        py, _ = run_python(x, ("summary", "nan"), nan_mode="warn")
    assert [s.stats.nan for s in nat] == [s.stats.nan for s in py] == [1, 1]


def test_finite_tensor_with_nan_action_stays_native():
    x = torch.randn(10)
    nat, _ = run_native(x, ("summary", "nan"))
    assert len(nat) == 2 and nat[0].stats.finite


def test_opcheck_with_native_kernel():
    s = site(("summary",))
    for x in (torch.randn(3, 4), torch.randn(5)[::2], torch.tensor(2.0)):
        torch.library.opcheck(ops.probe, (x, s.id), test_utils=("test_schema", "test_faketensor",
                                                                 "test_autograd_registration"))


def test_ring_reuses_slots_and_counts_drops():
    s = site(("record",), capacity=3)
    x = torch.randn(256)
    with dynstep.session() as sess:
        for i in range(10):
            torch.ops.dynstep.probe(x + i, s.id)
            if i == 3:
                held_after_warmup = dynstep.record_memory().held
        held_at_end = dynstep.record_memory().held
        recs = sess.records()
    assert held_after_warmup == held_at_end == 3 * x.numel() * 4  # the ring holds 3 copies
    assert [r.call for r in recs] == [7, 8, 9]
    assert sess.dropped[s.probe] == 7
    assert torch.equal(recs[-1].tensor, x + 9)


def test_memory_cap_drops_oldest_and_reports():
    s = site(("record",), capacity=10)
    x = torch.randn(1000)
    previous = dynstep.record_memory().cap
    dynstep.set_record_memory_cap(3 * x.numel() * 4)
    try:
        with dynstep.session() as sess:
            for i in range(5):
                torch.ops.dynstep.probe(x + i, s.id)
            assert dynstep.record_memory().held <= 3 * x.numel() * 4
            recs = sess.records()
        assert [r.call for r in recs] == [2, 3, 4]
        assert sess.dropped[s.probe] == 2 and sess.dropped_by_memory_cap == 2
    finally:
        dynstep.set_record_memory_cap(previous)


def test_copy_larger_than_cap_keeps_stats_only():
    s = site(("record",), capacity=2)
    previous = dynstep.record_memory().cap
    dynstep.set_record_memory_cap(100)
    try:
        with dynstep.session() as sess:
            torch.ops.dynstep.probe(torch.ones(1000), s.id)
        (rec,) = sess.records()
        assert rec.tensor is None and rec.stats.count == 1000 and sess.dropped_by_memory_cap == 1
    finally:
        dynstep.set_record_memory_cap(previous)


def test_small_summaries_are_stats_at_drain_outside_the_record_memory():
    """A summary of a small tensor is copied at the hit and summarised when read (csrc/probe_cpu.cpp:
    kDeferredSummaryBytes): the copy never counts as record memory nor comes back as a tensor,
    and the stats are those of the value at the hit, not of what the tensor holds later."""
    s = site(("summary",))
    x = torch.arange(16.0)
    held = dynstep.record_memory().held
    with dynstep.session() as sess:
        torch.ops.dynstep.probe(x, s.id)
        x.mul_(100)  # the model goes on writing the buffer
        assert dynstep.record_memory().held == held
        (snap,) = sess.records()
    assert snap.tensor is None and (snap.stats["max"], snap.stats["mean"]) == (15.0, 7.5)


def test_close_site_leaves_a_closed_noop_and_releases_ring_memory():
    native = native_mod.get()
    s = site(("record",), capacity=4)
    held = dynstep.record_memory().held
    torch.ops.dynstep.probe(torch.ones(100), s.id)  # sits in the native ring, not drained
    assert dynstep.record_memory().held == held + 400
    native.close_site(s.id)  # natively, without the drain runtime.close_site does first
    assert dynstep.record_memory().held == held  # the replaced ring's copy left the account
    assert native.is_registered(s.id)  # compiled graphs may still call it
    native.close_site(s.id)  # twice: harmless
    torch.ops.dynstep.probe(torch.ones(100), s.id)
    state = native.site_state(s.id)
    calls, (size, ring_drops, memory_drops) = state[0], state[4:7]
    assert (calls, size, ring_drops, memory_drops) == (0, 0, 0, 0)  # a closed site ignores hits


def test_reregistering_keeps_the_ring_or_releases_a_replaced_one():
    native = native_mod.get()
    s = site(("record",), capacity=4)
    held = dynstep.record_memory().held
    with dynstep.session() as sess:
        torch.ops.dynstep.probe(torch.ones(50), s.id)
        assert dynstep.record_memory().held == held + 200
        rings.register_native(s)   # same ring: only the action mask changes, the hit stays
        assert dynstep.record_memory().held == held + 200
        assert [r.tensor.sum().item() for r in sess.records()] == [50.0]
        torch.ops.dynstep.probe(torch.ones(50), s.id)
        native.register_site(s.id, rings.action_bits(s), 8, 1)  # another ring: the old one is released
        assert dynstep.record_memory().held == held
    native.remove_site(s.id)
    native.remove_site(s.id)
    assert not native.is_registered(s.id)


def test_threads_get_their_own_hits():
    s = site(("summary",))
    seen = {}

    def work(tag: float) -> None:
        with dynstep.session() as sess:
            for _ in range(3):
                torch.ops.dynstep.probe(torch.full((4,), tag), s.id)
            seen[tag] = [r.stats.mean for r in sess.records()]

    threads = [threading.Thread(target=work, args=(float(t),)) for t in (1, 2)]
    with dynstep.session() as outer:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert seen == {1.0: [1.0] * 3, 2.0: [2.0] * 3}
    assert len(outer.records()) == 0


def test_native_under_inductor_no_graph_break():
    s = site(("summary", "record"))

    @torch.compile(backend="inductor", fullgraph=True)
    def f(x):
        y = x.sin()
        torch.ops.dynstep.probe(y, s.id)
        return y * 2

    x = torch.randn(8)
    with dynstep.session() as sess:
        f(x)
        f(x + 1)
    recs = sess.records()
    assert [r.call for r in recs] == [0, 1]
    assert torch.allclose(recs[1].tensor, (x + 1).sin())


def test_kill_switch_keeps_python_kernel():
    code = ("import torch; from dynstep.ops import native as n, schema as o; from dynstep.probe import registration; "
            "registration.ensure(); print(o.registered_kernels()['probe'], n.status().reason)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "DYNSTEP_NATIVE": "0"}).stdout
    assert "'CPU'" not in out and "disabled by DYNSTEP_NATIVE=0" in out


def test_doctor_names_native_kernel():
    out = subprocess.run([sys.executable, "-m", "dynstep", "doctor"], capture_output=True, text=True).stdout
    from dynstep.ops import native

    if native.with_cuda():  # a CUDA torch with a toolkit: both kernels are built
        assert "native: CPU,CUDA" in out
    else:
        assert "native: CPU" in out and "missing CUDA: " + native.cuda_reason() in out


def test_stub_matches_the_extension():
    import ast
    from pathlib import Path

    from dynstep.ops import native

    stub = ast.parse((Path(dynstep.__file__).parent / "_native_ext.pyi").read_text())
    names = {n.name for n in stub.body if isinstance(n, ast.FunctionDef)} | \
        {t.id for n in stub.body if isinstance(n, ast.AnnAssign) for t in [n.target] if isinstance(t, ast.Name)}
    module = native.get()
    cuda_only = {"cuda_replays", "cuda_payloads"}
    public = {n for n in dir(module) if not n.startswith("_")}
    assert public - names == set()
    assert names - public <= cuda_only


def test_a_huge_record_option_is_bounded_by_the_record_memory_cap():
    """Issue 14 item 11: record=5_000_000 silently preallocated 2.4 GB of ring slots."""
    saved = rings.record_memory().cap
    rings.set_record_memory_cap(1 << 20)
    try:
        with pytest.warns(RuntimeWarning, match=r"record=5000000 .* would preallocate .*keeping the last 1365 hits"):
            s = SITES.add(kind="value", probe="huge", node="n", target="t", module="", source="t:1",
                          source_text="", graph="g", actions=("record",), capacity=5_000_000)   # registers natively
        for i in range(1400):
            torch.ops.dynstep.probe(torch.full((2,), float(i)), s.id)
        held, ring_drops = native_mod.get().site_state(s.id)[4:6]
        assert held == 1365 and ring_drops == 1400 - 1365
        rings.close_site(s.id)
    finally:
        rings.set_record_memory_cap(saved)


def test_the_first_nonfinite_hit_is_handed_to_python_typed_and_reset_clears_it():
    """The sticky non-finite flag carries the first NaN/Inf hit's call and counts as numbers (no
    message parsed back); later hits do not replace it; reset_flags clears it (issue 27 item 4)."""
    from dynstep.probe.api import CheckAction, TensorProbe

    native = native_mod.get()
    with TensorProbe("flag", [CheckAction()], when="always") as p:   # expected=None: a finiteness check
        p(torch.ones(4))                                                          # call 0: finite
        p(torch.tensor([1.0, float("nan"), float("inf"), float("nan")]))          # call 1: the first
        p(torch.tensor([float("inf")]))                                           # call 2: not the first
        state = native.site_state(p._site_id)
        assert state[1] is True and tuple(state[7:10]) == (1, 2, 1)
        assert state[3] == "call 1: 2 NaN, 1 Inf"
        native.reset_flags(p._site_id)
        state = native.site_state(p._site_id)
        assert state[1] is False and tuple(state[7:10]) == (-1, 0, 0) and state[3] == ""
