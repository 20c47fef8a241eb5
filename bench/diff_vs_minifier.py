"""Time to localize one planted Inductor bug: dynstep diff vs torch's accuracy minifier.

The bug is torch's own test fixture `torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY =
"accuracy"` (Inductor's C++ relu computes relu(x) + 1). Each contender runs in its own
subprocess with a fresh Inductor cache. The minifier is timed as a user meets it: the run with
TORCHDYNAMO_REPRO_AFTER=aot, TORCHDYNAMO_REPRO_LEVEL=4 (which detects the accuracy failure and
writes minifier_launcher.py), then `python minifier_launcher.py` (which minifies), both under
one wall-clock cap; we count the aten nodes left in its minified repro. Also: peak RSS of `dynstep.diff` against a
plain compiled run of a model with large activations (the diff must stream).

    python bench/diff_vs_minifier.py [--cap 600] [--only time|memory]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model_and_input(width: int, batch: int):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2, self.fc3, self.fc4 = (nn.Linear(width, width) for _ in range(4))

        def forward(self, x):
            x = torch.tanh(self.fc1(x))
            x = F.gelu(self.fc2(x))
            x = torch.relu(self.fc3(x))  # PLANTED: Inductor's relu is wrong here
            return self.fc4(x).softmax(-1)

    torch.manual_seed(0)
    return Net().eval(), torch.randn(batch, width)


def worker(kind: str, width: int, batch: int) -> dict:
    import torch
    import torch._inductor.config as iconfig

    model, x = model_and_input(width, batch)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    iconfig.cpp.inject_relu_bug_TESTING_ONLY = "accuracy" if kind != "plain" else None
    t0 = time.perf_counter()
    out: dict = {"kind": kind}
    if kind == "dynstep":
        import dynstep

        report = dynstep.diff(model, x, backend="inductor", ladder=False)
        first = report.first_divergence
        out.update(found=first is not None and first.source.endswith(":" + _planted_line()),
                   where=first.where if first else None, compiles=report.graphs[0].compiles)
    elif kind in ("plain", "minifier"):
        with torch.no_grad():
            torch.compile(model)(x)
    out["seconds"] = time.perf_counter() - t0
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["rss_before_mb"] = base / 1024
    return out


def _planted_line() -> str:
    with open(__file__) as f:
        return str(next(i for i, line in enumerate(f, 1) if "# PLANTED" in line and "next(" not in line))


def spawn(kind: str, width: int, batch: int, cap: float, env_extra: dict) -> dict:
    cache = tempfile.mkdtemp(prefix="dynstep-bench-")
    env = dict(os.environ, PYTHONPATH=ROOT, TORCHINDUCTOR_CACHE_DIR=cache, **env_extra)
    t0 = time.perf_counter()
    try:
        run = subprocess.run([sys.executable, __file__, "--worker", kind, "--width", str(width),
                              "--batch", str(batch)], cwd=cache, env=env, capture_output=True, text=True,
                             timeout=cap)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "timed_out": True, "wall": time.perf_counter() - t0, "dir": cache}
    wall = time.perf_counter() - t0
    result = {"kind": kind, "timed_out": False, "wall": wall, "rc": run.returncode, "dir": cache}
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
    if lines:
        result.update(json.loads(lines[-1]))
    result["minifier_output"] = _minifier_artifacts(cache)
    result["stderr_tail"] = run.stderr[-600:]
    return result


def run_launcher(result: dict, cap: float) -> dict:
    """Phase two of the minifier: run the launcher it wrote, within what is left of the cap."""
    launchers = [p for p in result.get("minifier_output", []) if p.endswith("minifier_launcher.py")]
    if result.get("timed_out") or not launchers:
        return result
    left = cap - result["wall"]
    launcher = os.path.join(result["dir"], launchers[0])
    env = dict(os.environ, PYTHONPATH=ROOT, TORCHINDUCTOR_CACHE_DIR=os.path.join(result["dir"], "cache2"))
    t0 = time.perf_counter()
    try:
        run = subprocess.run([sys.executable, launcher], cwd=result["dir"], env=env, capture_output=True,
                             text=True, timeout=max(left, 1))
        result["launcher_rc"] = run.returncode
        result["launcher_tail"] = (run.stdout + run.stderr)[-400:]
    except subprocess.TimeoutExpired:
        result["timed_out"] = True
    result["wall"] += time.perf_counter() - t0
    result["minifier_output"] = _minifier_artifacts(result["dir"])
    result["minified_nodes"] = _minified_nodes(result["dir"])
    return result


def _minified_nodes(directory: str) -> int | None:
    """aten calls in the newest minified repro the minifier wrote (checkpoints/ or repro.py)."""
    best = None
    for base, _, files in os.walk(directory):
        for f in files:
            path = os.path.join(base, f)
            if f.endswith(".py") and ("checkpoints" in base or f.startswith("repro")):
                mtime = os.path.getmtime(path)
                if best is None or mtime > best[0]:
                    best = (mtime, path)
    if best is None:
        return None
    with open(best[1]) as fh:
        return fh.read().count("torch.ops.aten.")


def _minifier_artifacts(directory: str) -> list[str]:
    found = []
    for base, _, files in os.walk(directory):
        found += [os.path.relpath(os.path.join(base, f), directory) for f in files
                  if f.startswith(("minifier_launcher", "repro")) and f.endswith(".py")]
    return sorted(found)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--cap", type=float, default=600.0, help="wall-clock cap for the minifier (s)")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--mem-width", type=int, default=1024)
    ap.add_argument("--mem-batch", type=int, default=8192)
    ap.add_argument("--only", choices=("time", "memory"))
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.width, args.batch)))
        return
    if args.only != "memory":
        time_to_localize(args)
    if args.only != "time":
        memory(args)


def time_to_localize(args: argparse.Namespace) -> None:
    dyn = spawn("dynstep", args.width, args.batch, args.cap, {})
    print("dynstep :", json.dumps({k: dyn.get(k) for k in ("wall", "found", "where", "compiles")}), flush=True)
    mini = spawn("minifier", args.width, args.batch, args.cap,
                 {"TORCHDYNAMO_REPRO_AFTER": "aot", "TORCHDYNAMO_REPRO_LEVEL": "4"})
    mini = run_launcher(mini, args.cap)
    print("minifier:", json.dumps({k: mini.get(k) for k in ("wall", "timed_out", "rc", "launcher_rc",
                                                             "minified_nodes", "minifier_output")}), flush=True)
    speed = mini["wall"] / dyn["wall"]
    print(f"time to localize: dynstep {dyn['wall']:.1f}s, minifier {mini['wall']:.1f}s"
          f"{' (hit the cap)' if mini['timed_out'] else ''} -> {'>=' if mini['timed_out'] else ''}{speed:.1f}x")


def memory(args: argparse.Namespace) -> None:
    # glibc raises its mmap threshold after the first large free, after which freed tensors stay
    # in the heap and RSS measures fragmentation, not live tensors; pin it for both runs.
    env = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    plain = spawn("plain", args.mem_width, args.mem_batch, args.cap, env)
    mem = spawn("dynstep", args.mem_width, args.mem_batch, args.cap, env)
    p_delta = plain["peak_rss_mb"] - plain["rss_before_mb"]
    d_delta = mem["peak_rss_mb"] - mem["rss_before_mb"]
    print(f"peak RSS above the loaded model (width {args.mem_width}, batch {args.mem_batch}): "
          f"plain compiled {p_delta:.0f} MB, dynstep diff {d_delta:.0f} MB -> {d_delta / p_delta:.2f}x "
          f"(absolute peaks {plain['peak_rss_mb']:.0f} / {mem['peak_rss_mb']:.0f} MB)")


if __name__ == "__main__":
    main()
