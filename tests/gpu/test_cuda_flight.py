"""The flight recorder on CUDA under `mode="reduce-overhead"` (issue 28's CUDA part, issue 32 item 1).

TinyGPT trained with SGD on the GPU, compiled by superstep with Inductor and CUDA graphs, the flight
recorder on every node: its probes stay inside the captured graphs (`cudagraph_skips == 0`), a NaN
planted in a named weight at step N is dumped naming step N, that module and its line with the K steps
before it, no trigger writes nothing, and the losses equal plain `torch.compile(mode="reduce-overhead")`
(closeness, not bitwise: on CUDA the fused program's Triton kernels may round an ulp differently from
plain Inductor's, see docs/gpu-validation.md). Each run is a subprocess, so a crash in CUDA graph
recording is a failed test, not a dead test session.

Skipped without CUDA. Results on a GPU: docs/gpu-validation.md.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

K = 3
LOOP = textwrap.dedent("""
    import json, sys, warnings
    import torch, torch.nn.functional as F
    import dynstep
    from torch._dynamo.utils import counters
    from dynstep.front.demo.model import make
    warnings.simplefilter("ignore")
    dumps, nan_at, how, K = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    model, idx = make(seed=0, layers=2)
    model, idx = model.cuda(), idx.cuda()
    targets = torch.roll(idx, -1, dims=1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    if how == "plain":
        cm = torch.compile(model, mode="reduce-overhead")
    else:
        cm = torch.compile(model, backend="superstep", options={
            "inner": "inductor", "mode": "reduce-overhead", "flight": {"steps": K, "path": dumps}})
    losses = []
    for step in range(8):
        with torch.no_grad():
            if step == nan_at:
                model.blocks[1].mlp.fc.weight[0, 0] = float("nan")
        loss = F.cross_entropy(cm(idx).flatten(0, 1), targets.flatten())
        loss.backward()
        losses.append(dynstep.flight.watch("loss", loss))
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    out = {"losses": [repr(x) for x in losses], "skips": int(counters["inductor"]["cudagraph_skips"]), "dumps": []}
    rec = dynstep.flight.current()
    if rec is not None:
        out["dumps"] = [str(p) for p in rec.dumps]
        for p in rec.dumps:
            r = dynstep.load(p)
            t = r.trigger
            out["trigger"] = dict(kind=t.kind, step=t.step, module=t.module, source=t.source, node=t.node,
                                  phase=t.phase, graph=t.graph)
            out["steps"] = sorted({s.step for s in r.all()})
            out["devices"] = sorted({s.device for s in r.all()})
            out["values"] = len({(s.graph, s.node) for s in r.all() if s.kind == "value"})
            out["grads"] = len({(s.graph, s.node) for s in r.all() if s.kind == "grad"})
    print("RESULT " + json.dumps(out))
""")


def _loop(tmp_path, how: str, nan_at: int = -1) -> dict:
    proc = subprocess.run([sys.executable, "-c", LOOP, str(tmp_path / "dumps"), str(nan_at), how, str(K)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_a_nan_planted_under_reduce_overhead_is_dumped_with_its_step_module_and_line(tmp_path):
    out = _loop(tmp_path, "flight", nan_at=5)
    assert out["skips"] == 0                                   # the probes stayed inside the captured graphs
    assert len(out["dumps"]) == 1, out
    t = out["trigger"]
    assert (t["kind"], t["step"], t["phase"], t["graph"]) == ("nonfinite", 5, "forward", "forward[0/0]")
    assert t["module"] == "blocks.1.mlp.fc" and t["source"] == "model.py:44" and t["node"].startswith("linear")
    assert out["steps"] == list(range(5 - K, 6))                # K steps before it, and its own
    assert out["devices"] == ["cuda:0"] and out["values"] > 50 and out["grads"] > 0


def test_no_trigger_writes_nothing_and_the_losses_equal_plain_reduce_overhead(tmp_path):
    flight = _loop(tmp_path, "flight")
    plain = _loop(tmp_path, "plain")
    assert flight["skips"] == 0 and flight["dumps"] == [] and not (tmp_path / "dumps").exists()
    a = [float(x) for x in flight["losses"]]
    b = [float(x) for x in plain["losses"]]
    assert all(math.isfinite(x) for x in a)
    assert a == pytest.approx(b, rel=1e-5)
