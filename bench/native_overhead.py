"""Cost of dynstep::probe under CPU Inductor: unprobed vs Python-kernel vs native-kernel probes.

    python bench/native_overhead.py            # prints a table (about two minutes on 2 cores)
    python bench/native_overhead.py --quick

One run measures everything against a baseline taken in the same process: the native kernel
here, the Python kernel in a child process started with DYNSTEP_NATIVE=0 (the only clean way to
have the Python kernel serve the op while the native one exists), each with its own unprobed
baseline. Graph: 8 elementwise ops, a probe after each (8 probes per call), on 64 and 16 Mi
float32 elements. Also: record on the large tensor against a plain copy of the same bytes.
One torch thread throughout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

N_OPS = 8


def make_fn(site_ids: list[int] | None):
    def f(x):
        for i in range(N_OPS):
            x = x * 1.0001 + 0.5 if i % 2 else torch.sin(x)
            if site_ids is not None:
                torch.ops.dynstep.probe(x, site_ids[i])
        return x

    return torch.compile(f, backend="inductor", fullgraph=True)


def timeit(fn, x, iters: int, repeats: int = 5) -> float:
    """Median seconds per call (after two warm-up calls)."""
    fn(x)
    fn(x)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn(x)
        times.append((time.perf_counter() - t0) / iters)
    return statistics.median(times)


def sites(actions: tuple[str, ...], capacity: int = 1) -> list[int]:
    from dynstep.sites import SITES

    return [SITES.add(kind="value", probe="bench", node=f"n{i}", target="t", module="", source="bench:1",
                      source_text="", graph="bench", actions=actions, capacity=capacity).id
            for i in range(N_OPS)]


def measure(quick: bool) -> dict:
    import dynstep
    import dynstep.ops  # noqa: F401  (loads the native kernel unless DYNSTEP_NATIVE=0)
    from dynstep import native

    torch.set_num_threads(1)
    out: dict = {"kernel": "native" if native.get() is not None else "python"}
    # (elements, calls per timing, timings): the Python kernel takes seconds per large call
    sizes = {"small": (64, 400 if quick else 3000, 5), "large": (16 * 1024 * 1024, 1, 2 if quick else 3)}
    for label, (n, iters, repeats) in sizes.items():
        x = torch.randn(n)
        base = timeit(make_fn(None), x, iters, repeats)
        row = {"unprobed_us": base * 1e6}
        for actions in [(), ("summary",), ("record",)]:
            fn = make_fn(sites(actions))
            with dynstep.session(summaries=4):
                t = timeit(fn, x, iters, repeats)
            name = "+".join(actions) or "disabled"
            row[f"{name}_us"] = t * 1e6
            row[f"{name}_per_probe_us"] = (t - base) * 1e6 / N_OPS
            row[f"{name}_ratio"] = t / base
        out[label] = row
    if out["kernel"] == "native":
        out["record_vs_copy"] = record_vs_copy(quick)
    return out


def record_vs_copy(quick: bool) -> dict:
    """One native record hit on 16 Mi float32 against `dst.copy_(x)` into a preallocated buffer."""
    import dynstep

    x = torch.randn(16 * 1024 * 1024)
    dst = torch.empty_like(x)
    (site,) = sites(("record",))[:1]
    iters = 3 if quick else 5

    def record(t):
        torch.ops.dynstep.probe(t, site)

    def copy(t):
        dst.copy_(t)

    with dynstep.session(summaries=1):
        rec = timeit(record, x, iters)
    cp = timeit(copy, x, iters)
    (stats_site,) = sites(("summary",))[:1]
    with dynstep.session(summaries=1):
        summ = timeit(lambda t: torch.ops.dynstep.probe(t, stats_site), x, iters)
    return {"bytes": x.numel() * 4, "record_ms": rec * 1e3, "copy_ms": cp * 1e3, "summary_ms": summ * 1e3,
            "record_over_copy": rec / cp}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.quick)))
        return
    env = {**os.environ, "DYNSTEP_NATIVE": "0"}
    cmd = [sys.executable, __file__, "--child"] + (["--quick"] if args.quick else [])
    python = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
    nat = measure(args.quick)
    if nat["kernel"] != "native":
        sys.exit(f"native kernel not loaded: {__import__('dynstep.native').native.status().reason}")
    print(f"torch {torch.__version__}, 1 thread, {N_OPS} ops and {N_OPS} probes per call, CPU Inductor")
    print(f"{'size':<6} {'kernel':<7} {'actions':<9} {'call µs':>11} {'µs/probe':>9} {'ratio':>7}")
    for label in ("small", "large"):
        for kernel, res in (("python", python), ("native", nat)):
            row = res[label]
            print(f"{label:<6} {kernel:<7} {'unprobed':<9} {row['unprobed_us']:>11.1f} {'':>9} {1.0:>7.2f}")
            for name in ("disabled", "summary", "record"):
                if f"{name}_us" in row:
                    print(f"{label:<6} {kernel:<7} {name:<9} {row[name + '_us']:>11.1f} "
                          f"{row[name + '_per_probe_us']:>9.2f} {row[name + '_ratio']:>7.2f}")
    rc = nat["record_vs_copy"]
    print(f"record one 16 Mi float32 tensor ({rc['bytes'] >> 20} MiB): record {rc['record_ms']:.2f} ms, "
          f"summary only {rc['summary_ms']:.2f} ms, dst.copy_(x) {rc['copy_ms']:.2f} ms, "
          f"record/copy {rc['record_over_copy']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"python": python, "native": nat}, f, indent=1)


if __name__ == "__main__":
    main()
