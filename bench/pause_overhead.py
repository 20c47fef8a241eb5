"""What pause selectors cost when they never stop, against the same graph compiled without them.

    python bench/pause_overhead.py [--inner inductor] [--calls 200] [--repeats 7]

Three compilations of the bundled TinyGPT forward, timed in the same run, rounds interleaved
(the best round of each: the machine may be shared):
  baseline      torch.compile(model, backend=<inner>)
  unmatched     superstep with a pause selector that matches nothing in the graph: the graph
                gets no stop points (the "graphs without pauses pay nothing" rule); target <= 1.05
  stop points   superstep with a pause selector that matches, cleared so it never stops: the
                graph is compiled twice, with a step point after every node (what makes `s`
                possible) and plain; while nothing can stop in it the plain variant runs
                (pause.two_variants); target <= 1.05. While stepping, the variant with stop points
                runs: each step point costs an op call Inductor cannot fuse across (about 3-4x the
                graph on this 2-layer model, measured before the two-variant dispatch).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache")

import torch  # noqa: E402

import dynstep  # noqa: E402
from dynstep.front.demo.model import make  # noqa: E402
from dynstep.step.stepper import STEPPER  # noqa: E402


def interleaved_us(fns: dict, idx, calls: int, repeats: int) -> dict[str, float]:
    """Best per-call time of each variant, rounds interleaved so machine noise hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    with torch.no_grad():
        for fn in fns.values():
            for _ in range(20):
                fn(idx)
        for _ in range(repeats):
            for name, fn in fns.items():
                start = time.perf_counter()
                for _ in range(calls):
                    fn(idx)
                times[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: min(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inner", default="inductor")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 16)
    model, idx = make(layers=2)
    model.eval()
    variants = {
        "baseline": lambda: torch.compile(model, backend=args.inner),
        "unmatched": lambda: torch.compile(model, backend=dynstep.superstep(
            inner=args.inner, pause=["module:no.such.module"], commands="c")),
        "stop points": lambda: torch.compile(model, backend=dynstep.superstep(
            inner=args.inner, pause=["module:blocks.1.attn"], commands="c")),
    }
    STEPPER.disabled.add("module:blocks.1.attn")     # selected, but cleared: it never stops
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = {name: build() for name, build in variants.items()}
        results = interleaved_us(compiled, idx, args.calls, args.repeats)
    base = results["baseline"]
    print(f"TinyGPT(layers=2) forward, inner={args.inner}, 1 thread, best of {args.repeats} interleaved rounds of {args.calls} calls")
    for name, us in results.items():
        print(f"  {name:<12} {us:9.1f} us/call   ratio {us / base:.3f}")


if __name__ == "__main__":
    main()
