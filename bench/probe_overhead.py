"""Probe overhead on a small transformer under Inductor on CPU, against plain torch.compile, in one run.

    python bench/probe_overhead.py [--layers 4] [--rounds 7] [--iters 50]

Variants, each compiled once and then timed in interleaved rounds (median of round means):
  plain       torch.compile(model)                                   (the baseline)
  superstep   backend="superstep", no options (transparent)
  summary     probes on every block output + every block's attn and mlp, action summary
  record      the same probes, action record (CPU copy into the ring)
Prints time per step, the ratio to plain, and the cost per probe hit in microseconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache")

import torch  # noqa: E402

import dynstep  # noqa: E402
from dynstep.demo.model import make  # noqa: E402

PROBES = ["module:blocks.*", "module:blocks.*.attn", "module:blocks.*.mlp"]


def build(variant: str, model):
    if variant == "plain":
        return torch.compile(model)
    if variant == "superstep":
        return torch.compile(model, backend="superstep")
    return torch.compile(model, backend="superstep",
                         options={"inner": "inductor", "probe": PROBES, "actions": [variant], "record": 4})


def time_calls(fn, x, iters: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn(x)
    return (time.perf_counter() - t0) / iters


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, idx = make(layers=args.layers)
    model.eval()
    variants = ["plain", "superstep", "summary", "record"]
    fns = {}
    with torch.no_grad(), dynstep.session(summaries=64):
        for v in variants:
            fns[v] = build(v, model)
            for _ in range(5):
                fns[v](idx)
        samples: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(args.rounds):
            for v in variants:
                samples[v].append(time_calls(fns[v], idx, args.iters))
    med = {v: statistics.median(s) for v, s in samples.items()}
    probes = 3 * args.layers
    print(f"probe_overhead: TinyGPT layers={args.layers} dim=32 seq=16 batch=2, Inductor CPU, 1 thread, "
          f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"{'variant':<10} {'us/step':>10} {'ratio':>7} {'us/probe':>9}")
    for v in variants:
        per_probe = (med[v] - med["superstep"]) / probes * 1e6 if v in ("summary", "record") else float("nan")
        print(f"{v:<10} {med[v] * 1e6:10.1f} {med[v] / med['plain']:7.3f} {per_probe:9.1f}")
    print(f"probes per step: {probes}; no-selector ratio (target <= 1.02): {med['superstep'] / med['plain']:.3f}")


if __name__ == "__main__":
    main()
