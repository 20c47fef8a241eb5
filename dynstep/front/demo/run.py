"""`dynstep demo`: compile the bundled TinyGPT with superstep under Inductor, probe every block.

Engine half only: returns what it saw; `dynstep.front.cli` renders it.

    result = run_demo(inner="inductor", on_phase=print)   # on_phase: told what is about to take time
    result.snapshots, result.max_abs_vs_eager
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from ...core.records import Snapshot
from .model import make

PROBES = ("module:blocks.*", "module:blocks.*.attn", "module:blocks.*.mlp", "op:layer_norm")
NEXT = (("dynstep run --pause 'module:layers.0.mlp' train.py", "stop inside the compiled model, step, set"),
        ("dynstep run --probe 'module:**' --record run.dynstep train.py", "record every module's values"),
        ("dynstep report run.dynstep", "see the recording as a page with plots"),
        ("dynstep diff train.py", "the first op where compiled leaves eager"),
        ("dynstep doctor", "what is installed and which kernels were built"))


@dataclasses.dataclass(frozen=True)
class DemoResult:
    inner: str
    snapshots: tuple[Snapshot, ...]
    grads: tuple[Snapshot, ...]
    max_abs_vs_eager: float
    loss: float


def run_demo(inner: str = "inductor", steps: int = 2,
             on_phase: Callable[[str], None] = lambda _phase: None) -> DemoResult:
    """`on_phase(text)` is called before each part that takes a while (the first use builds the
    native kernel; the first call compiles), so a front end can say what is going on."""
    import dynstep
    from ...ops import native

    if native.needs_build():
        on_phase("building dynstep's native probe kernel (first use only: about a minute on 2 cores)")
        native.load()
    torch.manual_seed(0)
    model, idx = make()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    compiled = torch.compile(model, backend="superstep",
                             options={"inner": inner, "probe": list(PROBES), "actions": ["summary", "record"],
                                      "grads": True, "record": 4})
    with dynstep.session() as s:
        for step in range(steps):
            on_phase(f"compiling TinyGPT with Dynamo + {inner} and running training step 1 of {steps}" if step == 0
                     else f"training step {step + 1} of {steps}")
            logits = compiled(idx)
            loss = logits.float().logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    on_phase("comparing the compiled model with eager")
    with torch.no_grad():
        diff = (compiled(idx) - model(idx)).abs().max().item()
    last_call = steps - 1
    values = tuple(x for x in s.records(kind="value") if x.call == last_call)
    grads = tuple(x for x in s.records(kind="grad") if x.call == last_call)
    return DemoResult(inner=inner, snapshots=values, grads=grads, max_abs_vs_eager=diff, loss=loss.item())
