"""`dynstep demo`: compile the bundled TinyGPT with superstep under Inductor, probe every block.

Engine half only: returns what it saw; `dynstep.front.cli` renders it.

    result = run_demo(inner="inductor")
    result.snapshots, result.max_abs_vs_eager
"""

from __future__ import annotations

import dataclasses

import torch

from ...core.records import Snapshot
from .model import make

PROBES = ("module:blocks.*", "module:blocks.*.attn", "module:blocks.*.mlp", "op:layer_norm")


@dataclasses.dataclass(frozen=True)
class DemoResult:
    inner: str
    snapshots: tuple[Snapshot, ...]
    grads: tuple[Snapshot, ...]
    max_abs_vs_eager: float
    loss: float


def run_demo(inner: str = "inductor", steps: int = 2) -> DemoResult:
    import dynstep

    torch.manual_seed(0)
    model, idx = make()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    compiled = torch.compile(model, backend="superstep",
                             options={"inner": inner, "probe": list(PROBES), "actions": ["summary", "record"],
                                      "grads": True, "record": 4})
    with dynstep.session() as s:
        for _ in range(steps):
            logits = compiled(idx)
            loss = logits.float().logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        diff = (compiled(idx) - model(idx)).abs().max().item()
    last_call = steps - 1
    values = tuple(x for x in s.records(kind="value") if x.call == last_call)
    grads = tuple(x for x in s.records(kind="grad") if x.call == last_call)
    return DemoResult(inner=inner, snapshots=values, grads=grads, max_abs_vs_eager=diff, loss=loss.item())
