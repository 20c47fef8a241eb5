"""Cost of a CUDA probe inside a captured CUDA graph: device-side summary against a full-copy probe.

    python bench/cuda_probe_overhead.py        # skips (exit 0) without CUDA

Full copy is what torch-cudagraph-debug does: the whole tensor D2H into pinned memory, then a
host callback (here: dynstep's `record` action, which also computes stats on the device). The
summary probe moves a few dozen bytes. One run, one baseline: the same graph without probes.
NOT YET RUN ON A GPU (docs/gpu-validation.md).
"""

from __future__ import annotations

import statistics
import sys

import torch


def replay_ms(g: torch.cuda.CUDAGraph, iters: int = 50) -> float:
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            g.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)


def capture(x: torch.Tensor, site: int | None) -> torch.cuda.CUDAGraph:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x
        for _ in range(8):
            y = torch.sin(y)
            if site is not None:
                torch.ops.dynstep.probe(y, site)
    return g


def main() -> int:
    if not torch.cuda.is_available():
        print("cuda_probe_overhead: no CUDA device; skipped")
        return 0
    import dynstep
    from dynstep import _compat, ops  # noqa: F401
    from dynstep.sites import SITES

    if not _compat.has_kernel("dynstep::probe", "CUDA"):
        print("cuda_probe_overhead: no CUDA kernel registered for dynstep::probe (see `dynstep doctor`)")
        return 1

    def site(actions):
        return SITES.add(kind="value", probe="bench", node="n", target="t", module="", source="bench:1",
                         source_text="", graph="g", actions=actions, capacity=1).id

    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  8 probes per replay")
    print(f"{'elements':>10} {'plain ms':>9} {'summary ms':>11} {'full copy ms':>13} {'copy/summary':>13}")
    for n in (64, 1 << 20, 16 << 20):
        x = torch.randn(n, device="cuda")
        with dynstep.session(summaries=4):
            plain = replay_ms(capture(x, None))
            summ = replay_ms(capture(x, site(("summary",))))
            full = replay_ms(capture(x, site(("record",))))
        print(f"{n:>10} {plain:>9.3f} {summ:>11.3f} {full:>13.3f} {(full - plain) / max(summ - plain, 1e-9):>13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
