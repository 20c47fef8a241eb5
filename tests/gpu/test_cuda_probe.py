"""The CUDA probe kernel (csrc/cuda/): capture/replay recording, device-side summary, Inductor
reduce-overhead with probes inside the captured graph, hand-placed probes, gradients under capture.

Needs a GPU and a CUDA-enabled torch; skipped otherwise (and on a dispatcher check when the
CUDA kernel is not registered). NOT YET RUN ON A GPU: see docs/gpu-validation.md.
"""

from __future__ import annotations

import math

import pytest
import torch

import dynstep
from dynstep import _compat, ops  # noqa: F401  (ops loads the native kernels)
from dynstep.probe_api import CheckAction, RecordAction, TensorProbe
from dynstep.sites import SITES

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
    assert math.isclose(st.mean, fin.mean().item(), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(st.std, fin.std().item(), rel_tol=1e-6)
    assert ops_native().cuda_replays(site.id) == 2


def ops_native():
    from dynstep import native

    mod = native.get()
    assert mod is not None
    return mod


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
