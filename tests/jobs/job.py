"""A DDP training job of a small transformer for the distributed tests (gloo, CPU).

    torchrun --nproc-per-node 2 tests/jobs/job.py --out DIR [--steps 2] [--record DIR] [--wrap fsdp2]

Every torch.compile option comes from DYNSTEP_* (pause, ranks, commands...). Each rank writes
DIR/rank<N>.json: its losses and a checksum of its parameters. `simulate()` computes what each
rank must see, in eager, in one process (the gradients averaged as DDP does).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import weakref

import torch
import torch.nn as nn

DIM, SEQ, BATCH, WORLD = 16, 6, 3, 2
BREAKPOINT = os.environ.get("JOB_BREAKPOINT") == "1"     # dynstep.breakpoint() in each block (compile time)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.GELU(), nn.Linear(2 * DIM, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if BREAKPOINT:
            import dynstep

            dynstep.breakpoint(run=False)      # a compile-time stop only
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / DIM ** 0.5, dim=-1)
        x = x + self.proj(att @ v)
        return x + self.mlp(x)


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(DIM, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x).pow(2).mean()


def model() -> Tiny:
    torch.manual_seed(0)
    return Tiny()


def batch(rank: int, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(BATCH, SEQ, DIM, generator=g)


def checksum(m: nn.Module) -> list[float]:
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in m.parameters()]   # FSDP2's shards
    return [float(p.detach().double().sum()) for p in full]


def simulate(steps: int, scales: dict[int, float] | None = None) -> dict[int, dict]:
    """Eager, one process: each rank's forward, gradients averaged as DDP does, the same SGD steps.
    Per rank: losses, parameter checksums after training, and each layer's output per step.
    `scales`: rank -> factor layers.1's output is multiplied by at the first step (what a pause's `set` did)."""
    scales = scales or {}
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    out: dict[int, dict] = {r: {"losses": [], "layers": {"layers.0": [], "layers.1": []}} for r in range(WORLD)}
    for step in range(steps):
        grads = None
        for rank in range(WORLD):
            hooks = [m.layers[1].register_forward_hook(_scale(scales[rank]))] if step == 0 and rank in scales else []
            hooks += [m.layers[i].register_forward_hook(_keep(out[rank]["layers"][f"layers.{i}"])) for i in (0, 1)]
            m.zero_grad()
            loss = m(batch(rank, step))
            loss.backward()
            for h in hooks:
                h.remove()
            out[rank]["losses"].append(loss.item())
            mine = [p.grad.clone() for p in m.parameters()]
            grads = mine if grads is None else [a + b for a, b in zip(grads, mine)]
        for p, g in zip(m.parameters(), grads):
            p.grad = g / WORLD
        opt.step()
    for rank in range(WORLD):
        out[rank]["params"] = checksum(m)
    return out


def _keep(into: list):
    return lambda mod, inp, o: into.append(o.detach().clone())


def _scale(factor: float):
    def hook(mod, inp, o):   # what `set value = value * factor` does at a pause: in place, unseen by autograd
        with torch.no_grad():
            o.mul_(factor)
    return hook


def write(out: str, rank: int, data: dict) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(data, f)


def train(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import dynstep

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ddp = DDP(model()) if args.wrap == "ddp" else sharded(model())
    compiled = torch.compile(ddp, backend="superstep", options={"inner": args.inner})
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    session = dynstep.session(path=args.record) if args.record else dynstep.session()
    with session:
        for step in range(args.steps):
            opt.zero_grad()
            loss = compiled(batch(rank, step))
            loss.backward()
            opt.step()
            losses.append(loss.item())
    write(args.out, rank, {"losses": losses, "params": checksum(ddp.module if args.wrap == "ddp" else ddp)})
    held = weakref.ref(ddp) if args.wrap == "ddp" else None
    del compiled, ddp, opt, session
    end(held)


def end(ddp: weakref.ref | None) -> None:
    """Destroy the process group once nothing but Python's ProcessGroup object holds it.

    torch 2.13 with gloo: a DDP module's C++ Reducer holds the process group. When the Reducer is the last
    to let go of it (a DDP still alive after destroy_process_group, freed as train() returns), its
    destructor runs with the GIL held and joins gloo's worker threads, while a worker thread that is
    still freeing the last backward's allreduce waits for the GIL (the work keeps the backward's
    contextvars in its thread-local state): the rank never exits, its DDP output written (seen in about
    one 2-rank job in three on a loaded 2-core machine). Python's ProcessGroup object releases the GIL
    when it destroys the group, so the DDP module goes first, then the group.
    """
    import torch.distributed as dist

    group = dist.group.WORLD
    torch._dynamo.reset()       # compiled code may still refer to the wrapper
    gc.collect()
    if ddp is not None and ddp() is not None:
        raise RuntimeError("job.py: the DDP module outlived training; destroying the process group now could "
                           "hang this rank at exit (see end())")
    dist.destroy_process_group()
    del group                   # the last holder: the group ends here, without the GIL


def sharded(m: Tiny) -> Tiny:
    """FSDP2: each block and the whole model sharded across the ranks (fully_shard), CPU and gloo."""
    from torch.distributed.fsdp import fully_shard

    for layer in m.layers:
        fully_shard(layer)
    fully_shard(m)
    return m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--inner", default="aot_eager")
    ap.add_argument("--record", default=None)
    ap.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp")
    train(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
