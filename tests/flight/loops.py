"""Training loops the flight recorder's tests run: TinyGPT (the bundled model) and a small regression MLP,
with a NaN, an Inf, a spike or a bad token planted at a chosen step. Run as a script (the CLI and SIGTERM
tests) it trains TinyGPT with plain `torch.compile` (`dynstep run` routes it through superstep), or with
``backend="superstep"`` and no options (`DYNSTEP_FLIGHT` turns the recorder on).

    python -m tests.flight.loops --steps 8 --nan-at 5 [--superstep] [--sleep 0.2]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import dynstep
from dynstep.front.demo.model import make


def tiny(*, steps: int, flight=True, inner: str = "aot_eager", nan_at: int | None = None,
         spike_at: int | None = None, bad_token_at: int | None = None, accumulate: int = 1,
         compile_kwargs: dict | None = None, log=None):
    """TinyGPT trained `steps` optimizer steps; returns (model, losses)."""
    torch._dynamo.reset()
    model, idx = make(seed=0, layers=2)
    targets = torch.roll(idx, -1, dims=1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    kwargs = compile_kwargs if compile_kwargs is not None else {
        "backend": "superstep", "options": {"inner": inner, "flight": flight}}
    cm = torch.compile(model, **kwargs)
    losses = []
    for step in range(steps):
        plant(model, step, nan_at=nan_at, spike_at=spike_at)
        batch = idx.clone()
        if step == bad_token_at:
            batch[0, 0] = 10_000            # out of the embedding's range: the compiled call raises
        for _ in range(accumulate):
            loss = F.cross_entropy(cm(batch).flatten(0, 1), targets.flatten())
            (loss / accumulate).backward()
        losses.append(dynstep.flight.watch("loss", loss))
        opt.step()
        opt.zero_grad()
        if log is not None:
            log(step, losses[-1])
    return model, losses


def plant(model: nn.Module, step: int, *, nan_at: int | None, spike_at: int | None) -> None:
    with torch.no_grad():
        if step == nan_at:
            model.blocks[1].mlp.fc.weight[0, 0] = float("nan")
        if step == spike_at:
            model.head.weight.mul_(30.0)         # the logits, and the loss, jump


class Regression(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.ln = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        h = self.ln(h)
        return self.fc2(torch.relu(h))


def regression(*, steps: int, flight=True, inner: str = "aot_eager", inf_at: int | None = None,
               huge_at: int | None = None):
    """A small MLP regression; at step `inf_at` the data batch holds an Inf, at `huge_at` a row of finite
    values so large that the first layer overflows (a NaN/Inf the graph makes itself)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Regression()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    cm = torch.compile(model, backend="superstep", options={"inner": inner, "flight": flight})
    for step in range(steps):
        x = torch.randn(32, 8)
        if step == inf_at:
            x[3, 2] = float("inf")
        if step == huge_at:
            x[3] = 3e38
        loss = (cm(x).squeeze(-1) - x.sum(-1)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--nan-at", type=int, default=None)
    p.add_argument("--spike-at", type=int, default=None)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--superstep", action="store_true", help="backend='superstep' with no options (DYNSTEP_FLIGHT)")
    p.add_argument("--raise-at", type=int, default=None, help="raise RuntimeError after this step")
    args = p.parse_args(argv)

    def log(step: int, loss: float) -> None:
        print(f"step {step} loss {loss:.4f}", flush=True)
        if step == args.raise_at:
            raise RuntimeError(f"the script gave up at step {step}")
        time.sleep(args.sleep)

    kwargs = {"backend": "superstep", "options": {"inner": "aot_eager"}} if args.superstep else {"backend": "aot_eager"}
    tiny(steps=args.steps, nan_at=args.nan_at, spike_at=args.spike_at, compile_kwargs=kwargs, log=log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
