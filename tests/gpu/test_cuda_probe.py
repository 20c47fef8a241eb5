"""The CUDA probe kernel (csrc/cuda/): capture/replay recording, device-side summary, Inductor
reduce-overhead with probes inside the captured graph, hand-placed probes, gradients under capture,
and payload lifetime (issue #5): a closed probe's graph still replays safely, and payload memory
is freed when the last owner (the site's registry entry, or a graph that captured it) lets go.

Needs a GPU and a CUDA-enabled torch; skipped otherwise (and on a dispatcher check when the
CUDA kernel is not registered). Results on a GPU: docs/gpu-validation.md.
"""

from __future__ import annotations

import gc
import math
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import dynstep
from dynstep import _compat
from dynstep.probe import registration, rings

registration.ensure()   # the probe's kernels: the native CPU and CUDA ones when they build
from dynstep.probe.api import CheckAction, RecordAction, TensorProbe
from dynstep.core.sites import SITES

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(not _compat.has_kernel("dynstep::probe", "CUDA"),
                       reason="no CUDA kernel registered for dynstep::probe (see `dynstep doctor`)"),
]


def summary_site(actions=("summary",), capacity=8):
    return SITES.add(kind="value", probe="gpu", node="n", target="t", module="", source="gpu:1",
                     source_text="", graph="g", actions=actions, capacity=capacity)


def test_capture_replay_records_every_replay():
    static_x = torch.ones(4, device="cuda")
    probe = TensorProbe("mid", [RecordAction(capacity=8)])  # when="capture"
    probe(static_x + 2)  # eager warm-up: transparent
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        mid = probe(static_x + 2)
    for i in range(3):
        static_x.fill_(float(i))
        g.replay()
    torch.cuda.synchronize()
    recs = probe.records()
    assert [r.replay_index for r in recs] == [0, 1, 2]
    for i, r in enumerate(recs):
        assert r.tensor.device.type == "cpu"
        assert torch.equal(r.tensor, torch.full((4,), float(i) + 2))
    assert mid.device.type == "cuda"
    probe.close()


def test_summary_is_computed_on_device():
    site = summary_site()
    static_x = torch.randn(1 << 20, device="cuda")
    static_x[3] = math.nan
    g = torch.cuda.CUDAGraph()
    with dynstep.session() as s:
        with torch.cuda.graph(g):
            torch.ops.dynstep.probe(static_x * 2, site.id)
        g.replay()
        g.replay()
        torch.cuda.synchronize()
        recs = s.records()
    assert len(recs) == 2 and all(r.tensor is None for r in recs)  # stats only: nothing big copied
    ref = (static_x * 2).double().cpu()
    fin = ref[torch.isfinite(ref)]
    st = recs[-1].stats
    assert st.nan == 1 and st.count == fin.numel()
    assert st.min == fin.min().item() and st.max == fin.max().item()
    # float accumulation within each 16-byte vector, double across vectors and blocks
    assert math.isclose(st.mean, fin.mean().item(), rel_tol=1e-9, abs_tol=1e-6 * fin.std().item())
    assert math.isclose(st.std, fin.std().item(), rel_tol=1e-6)
    assert ops_native().cuda_replays(site.id) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                                   torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("n,offset", [(1, 0), (63, 1), (1000, 3), ((1 << 22) + 7, 1)])
def test_one_pass_summary_matches_float64_for_each_dtype_size_and_a_misaligned_view(dtype, n, offset):
    """The one-pass kernel: vector loads at the value's own width with a scalar head (a view that
    starts off a 16-byte boundary) and tail, one block or many (the last block folds), replayed
    three times (its ticket is reset after each launch)."""
    site = summary_site()
    if dtype.is_floating_point:
        base = (torch.randn(n + offset, device="cuda", dtype=torch.float64) * 4 + 1).to(dtype)
    else:
        base = torch.randint(0, 100, (n + offset,), device="cuda").to(dtype)
    x = base[offset:]  # contiguous, but its data pointer is not 16-byte aligned when offset > 0
    if dtype.is_floating_point and n > 10:
        x[5], x[n - 2] = math.nan, math.inf
    g = torch.cuda.CUDAGraph()
    with dynstep.session() as s:
        with torch.cuda.graph(g):
            torch.ops.dynstep.probe(x, site.id)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        recs = s.records()
    assert len(recs) == 3
    ref = x.double().cpu()
    fin = ref[torch.isfinite(ref)]
    for r in recs:
        st = r.stats
        assert (st.nan, st.inf, st.count) == (int(ref.isnan().sum()), int(ref.isinf().sum()), fin.numel())
        assert st.min == fin.min().item() and st.max == fin.max().item()
        assert st.absmax == fin.abs().max().item()
        spread = fin.std().item() if fin.numel() > 1 else 0.0
        assert math.isclose(st.mean, fin.mean().item(), rel_tol=1e-7, abs_tol=1e-6 * spread + 1e-12)
        if fin.numel() > 1:
            assert math.isclose(st.std, spread, rel_tol=1e-5, abs_tol=1e-12)


def ops_native():
    from dynstep.ops import native

    mod = native.get()
    assert mod is not None
    return mod


def test_summary_ring_orders_hits_across_sites_and_replays():
    a, b = summary_site(), summary_site()
    static_x = torch.randn(300, device="cuda")  # two blocks: the partial + final kernels publish
    g = torch.cuda.CUDAGraph()
    with dynstep.session() as s:
        with torch.cuda.graph(g):
            y = static_x * 2
            torch.ops.dynstep.probe(y, a.id)
            torch.ops.dynstep.probe(y + 1, b.id)
        for i in range(3):
            static_x.fill_(float(i))
            g.replay()
        torch.cuda.synchronize()
        recs = s.records()
    assert [(r.site, r.call) for r in recs] == [(a.id, 0), (b.id, 0), (a.id, 1), (b.id, 1), (a.id, 2), (b.id, 2)]
    assert [r.stats.max for r in recs] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert all(r.device == "cuda:0" and r.shape == (300,) and r.tensor is None for r in recs)


def test_summary_ring_overwritten_before_harvest_counts_drops():
    site = summary_site()  # a stats-only site's device ring holds 1024 hits (probe.rings.register_native)
    static_x = torch.zeros(8, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        torch.ops.dynstep.probe(static_x + 1, site.id)
    with dynstep.session(summaries=4096) as s:
        for _ in range(1030):
            g.replay()
        torch.cuda.synchronize()
        recs = s.records()
        assert s.dropped[site.probe] == 6  # the six oldest were overwritten on the device
    assert [r.call for r in recs] == list(range(6, 1030))
    assert all(r.stats.mean == 1.0 for r in recs)
    assert ops_native().cuda_replays(site.id) == 1030


def test_nonfinite_flag_survives_its_slot_being_overwritten():
    p = TensorProbe("fin-lapped", [CheckAction()])  # non-finite flag only: a stats-only payload
    static_x = torch.ones(8, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        p(static_x.log())
    static_x[0] = -1.0
    g.replay()  # NaN once ...
    static_x[0] = 1.0
    for _ in range(1100):  # ... then more clean replays than the ring holds
        g.replay()
    torch.cuda.synchronize()
    with pytest.raises(dynstep.CheckFailed, match="1 NaN"):
        p.assert_ok()
    p.close()


def test_eager_summary_hits_on_cuda():
    site = summary_site()
    with dynstep.session() as s:
        for i in range(3):
            torch.ops.dynstep.probe(torch.arange(5.0, device="cuda") + i, site.id)
        torch.cuda.synchronize()
        recs = s.records()
    assert [r.call for r in recs] == [0, 1, 2]
    assert [(r.stats.min, r.stats.max, r.stats.count) for r in recs] == [(0.0, 4.0, 5), (1.0, 5.0, 5), (2.0, 6.0, 5)]
    assert recs[0].device == "cuda:0"


def test_reduce_overhead_keeps_probe_inside_cudagraph():
    from torch._dynamo.utils import counters

    site = summary_site(("summary", "record"))

    def f(x):
        y = torch.sin(x) * 2
        torch.ops.dynstep.probe(y, site.id)
        return y + 1

    counters.clear()
    cf = torch.compile(f, mode="reduce-overhead")
    x = torch.randn(256, device="cuda")
    with dynstep.session() as s:
        for _ in range(5):
            out = cf(x)
        torch.cuda.synchronize()
        recs = s.records()
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    torch.testing.assert_close(out, torch.sin(x) * 2 + 1)
    assert len(recs) == 5  # warm-up run(s) and every replay
    torch.testing.assert_close(recs[-1].tensor, (torch.sin(x) * 2).cpu())
    assert ops_native().cuda_replays(site.id) >= 1  # at least one hit came from a replay


def test_hand_placed_probe_eager_always_and_check():
    with TensorProbe("eager", [RecordAction(2), CheckAction(torch.full((3,), 2.0))], when="always") as p:
        x = torch.full((3,), 2.0, device="cuda")
        assert p(x) is x
        torch.cuda.synchronize()
        p.assert_ok()
        assert torch.equal(p.records()[0].tensor, torch.full((3,), 2.0))


def test_compare_runs_at_replay_with_cpu_message():
    expected = torch.full((4,), 3.0)
    p = TensorProbe("cmp", [CheckAction(expected, rtol=0, atol=0.5)])
    static_x = torch.ones(4, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        p(static_x + 2)
    g.replay()
    torch.cuda.synchronize()
    p.assert_ok()
    static_x[1] = 5.0
    g.replay()
    torch.cuda.synchronize()
    with pytest.raises(dynstep.CheckFailed) as info:
        p.assert_ok()
    assert str(info.value) == ("TensorProbe 'cmp': call 1: 1 of 4 values differ beyond rtol=0, atol=0.5 "
                               "(max abs diff 4; first at flat index 1: got 7, expected 3)")
    p.close()


def test_finite_check_under_capture_is_sticky():
    p = TensorProbe("fin", [CheckAction()])
    static_x = torch.ones(8, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        p(static_x.log())
    g.replay()
    torch.cuda.synchronize()
    p.assert_ok()
    static_x[0] = -1.0  # log(-1) = NaN on the next replay
    g.replay()
    torch.cuda.synchronize()
    with pytest.raises(dynstep.CheckFailed, match="NaN"):
        p.assert_ok()
    p.close()


def test_gradients_in_backward_under_capture():
    model = torch.nn.Linear(8, 8).cuda()
    probe = TensorProbe("w.grad", [RecordAction(capacity=4)])
    probe.watch_grad(model.weight)
    x = torch.randn(4, 8, device="cuda")
    graphed = torch.cuda.make_graphed_callables(model, (x,))  # captures forward and backward
    for _ in range(2):
        model.zero_grad(set_to_none=False)
        graphed(x).sum().backward()
    torch.cuda.synchronize()
    recs = probe.records()
    assert len(recs) >= 2
    expected = torch.ones(4, 8, device="cuda").t().mm(x).cpu()  # d(sum(xW^T+b))/dW
    torch.testing.assert_close(recs[-1].tensor, expected)
    probe.close()


# -- payload lifetime (issue #5) -------------------------------------------------------------------
def payloads() -> tuple[int, int, int]:
    """(live, retired, ignored) CUDA payloads, after freeing what can be freed now."""
    return ops_native().cuda_payloads()


def wait_for_live(live: int, timeout: float = 10.0) -> tuple[int, int, int]:
    """Counts once `live` payloads remain: CUDA runs user-object destructors asynchronously, on its
    own thread, after the graph's launches have finished."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        torch.cuda.synchronize()
        counts = payloads()
        if counts[0] == live or time.monotonic() > deadline:
            return counts
        time.sleep(0.02)


def settle() -> tuple[int, int, int]:
    """Counts with nothing left to free: the baseline a test measures against."""
    torch._dynamo.reset()  # graph trees of earlier tests hold payloads; free them now, not mid-test
    gc.collect()
    torch.cuda.synchronize()
    deadline = time.monotonic() + 10.0
    history = [payloads()]
    while time.monotonic() < deadline:
        time.sleep(0.05)
        history.append(payloads())
        last = history[-3:]
        if len(last) == 3 and all(c[1] == 0 and c[0] == last[0][0] for c in last):
            return last[-1]
    return history[-1]


def test_close_then_replay_is_ignored_and_deleting_the_graph_frees_the_payload():
    live0, _, ignored0 = settle()
    p = TensorProbe("closed-under-graph", [RecordAction(capacity=8)])  # when="capture"
    static_x = torch.ones(4, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        p(static_x + 1)
    g.replay()
    torch.cuda.synchronize()
    assert len(p.records()) == 1
    assert payloads()[0] == live0 + 1  # one payload, for this capture, owned by g
    p.close()
    p.close()  # twice: harmless
    assert payloads()[:2] == (live0 + 1, 0)  # g still holds it: neither freed nor waiting
    for _ in range(3):
        g.replay()  # would write freed pinned memory if close had freed the payload
    torch.cuda.synchronize()
    assert payloads()[2] == ignored0 + 3  # every replay reached its host callback, which did nothing
    assert len(p.records()) == 1  # no new record in the closed probe
    del g
    assert wait_for_live(live0)[:2] == (live0, 0)


def test_deleting_a_graph_frees_its_payload_while_the_probe_stays_open():
    live0, *_ = settle()
    with TensorProbe("outlives-graphs", [RecordAction(capacity=8)]) as p:
        static_x = torch.zeros(4, device="cuda")
        graphs = []
        for i in range(2):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                p(static_x + i)
            graphs.append(g)
        del g
        assert payloads()[0] == live0 + 2  # one per capture
        for g in graphs:
            g.replay()
        del g
        torch.cuda.synchronize()
        assert [float(r.tensor[0]) for r in p.records()] == [0.0, 1.0]
        del graphs[0]
        assert wait_for_live(live0 + 1)[0] == live0 + 1
        graphs[0].replay()  # the other graph's payload is untouched
        torch.cuda.synchronize()
        assert float(p.records()[-1].tensor[0]) == 1.0
        graphs.clear()
        assert wait_for_live(live0)[:2] == (live0, 0)


def test_eager_payload_is_reused_and_freed_at_close():
    live0, *_ = settle()
    p = TensorProbe("eager-free", [RecordAction(4)], when="always")
    x = torch.ones(8, device="cuda")
    for _ in range(3):
        p(x)  # eager hits share one payload (capture id 0)
    torch.cuda.synchronize()
    assert payloads()[0] == live0 + 1
    assert len(p.records()) == 3
    p.close()
    assert wait_for_live(live0)[:2] == (live0, 0)


def test_close_does_not_free_under_an_eager_hit_still_in_flight():
    live0, *_ = settle()
    p = TensorProbe("in-flight", [RecordAction(2)], when="always")
    x = torch.ones(1 << 20, device="cuda")
    p(x)
    torch.cuda.synchronize()  # the payload exists and is idle
    w = torch.randn(4096, 4096, device="cuda")
    y = w
    for _ in range(100):  # a few hundred ms of queued work ahead of the next hit
        y = y @ w
    p(x)  # D2H copy + host callback queued behind the matmuls
    p.close()  # the registry lets go while that hit is still queued
    live, retired, _ = payloads()
    assert (live, retired) == (live0 + 1, 1)  # retired, but kept until its host callback has run
    torch.cuda.synchronize()
    assert wait_for_live(live0)[:2] == (live0, 0)
    del y


def test_reduce_overhead_replays_after_close_are_ignored_and_reset_frees():
    live0, _, ignored0 = settle()
    site = summary_site(("summary", "record"))

    def f(x):
        y = torch.cos(x) + 1
        torch.ops.dynstep.probe(y, site.id)
        return y * 2

    cf = torch.compile(f, mode="reduce-overhead")
    x = torch.randn(64, device="cuda")
    for _ in range(4):
        cf(x)
    torch.cuda.synchronize()
    assert ops_native().cuda_replays(site.id) >= 1  # a captured graph replays the probe
    rings.close_site(site.id)
    rings.close_site(site.id)
    with dynstep.session() as s:
        for _ in range(3):
            out = cf(x)
        torch.cuda.synchronize()
        assert s.records() == []
    torch.testing.assert_close(out, (torch.cos(x) + 1) * 2)
    assert payloads()[2] >= ignored0 + 1  # replays still reach the host callback, which ignores them
    del cf, out
    torch._dynamo.reset()  # frees the CUDA graph trees, and with them the captured payloads
    assert wait_for_live(live0)[:2] == (live0, 0)


def test_exit_with_a_live_graph_of_a_closed_probe_does_not_crash():
    code = textwrap.dedent("""
        import torch
        from dynstep import _compat
        from dynstep.probe.api import RecordAction, TensorProbe

        p = TensorProbe("exit", [RecordAction(2)])
        assert _compat.has_kernel("dynstep::probe", "CUDA")
        x = torch.ones(4, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            p(x + 1)
        p.close()
        g.replay()  # not synchronized: its host callback may run while the process exits
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
