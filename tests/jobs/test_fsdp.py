"""FSDP2 (`fully_shard`) under torch.compile with superstep, two gloo ranks under torchrun (issue 25).

Dynamo compiles each sharded block's forward as a frame of its own (FSDP2's hooks break the graph
around it): module paths are still the paths in the user's model (`layers.0.mlp.0`, not `mlp.0`), and
each rank's records equal its eager forward and backward hooks.
"""

from __future__ import annotations

import pytest
import torch

import dynstep

from . import job
from .test_jobs import assert_trained_like, env, results, torchrun

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built")


def eager_step0(rank: int) -> dict[str, dict[str, torch.Tensor]]:
    """Rank `rank`'s first step in eager: what forward and backward hooks see on each block."""
    m = job.model()
    seen: dict[str, dict[str, torch.Tensor]] = {"value": {}, "grad": {}}
    handles = []

    def keep(kind: str, name: str):
        def hook(mod, inputs, outputs):      # returns None: the module's output (and its autograd) unchanged
            seen[kind].setdefault(name, outputs[0].detach().clone() if kind == "grad" else outputs.detach().clone())
        return hook

    for name, mod in m.named_modules():
        if name.startswith("layers.") and name.count(".") in (1, 2):
            handles.append(mod.register_forward_hook(keep("value", name)))
            handles.append(mod.register_full_backward_hook(keep("grad", name)))
    m(job.batch(rank, 0)).backward()
    for h in handles:
        h.remove()
    return seen


def test_fsdp2_per_rank_records_equal_each_ranks_eager_hooks(tmp_path):
    record = tmp_path / "run.dynstep"
    done = torchrun("--out", str(tmp_path), "--record", str(record), "--wrap", "fsdp2", "--steps", "2",
                    environ=env(probe="module:layers.*,module:layers.*.mlp", actions="record", grads="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert_trained_like(results(tmp_path), job.simulate(steps=2))
    rec = dynstep.load(record)
    assert rec.ranks == [0, 1] and not rec.problems
    for rank in range(2):
        want = eager_step0(rank)
        for kind in ("value", "grad"):
            for name in ("layers.0", "layers.1", "layers.0.mlp", "layers.1.mlp"):
                snaps = [s for s in rec.records(f"module:{name}", kind=kind, rank=rank) if name in s.modules]
                assert snaps, (rank, kind, name, sorted({s.module for s in rec.records(rank=rank)}))
                first = min(snaps, key=lambda s: s.seq)
                torch.testing.assert_close(first.tensor, want[kind][name], rtol=1e-4, atol=1e-5)
