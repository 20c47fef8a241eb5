"""Time to localize one planted Inductor bug: dynstep diff vs torch's accuracy minifier, and
dynstep's root cause (ablations on the divergent node's subgraph) vs torch's CompilerBisector.

The bug is torch's own test fixture `torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY =
"accuracy"` (Inductor's C++ relu computes relu(x) + 1). Each contender runs in its own
subprocess with a fresh Inductor cache. The minifier is timed as a user meets it: the run with
TORCHDYNAMO_REPRO_AFTER=aot, TORCHDYNAMO_REPRO_LEVEL=4 (which detects the accuracy failure and
writes minifier_launcher.py), then `python minifier_launcher.py` (which minifies), both under
one wall-clock cap; we count the aten nodes left in its minified repro. Also: peak RSS of `dynstep.diff` against a
plain compiled run of a model with large activations (the diff must stream).

Root cause vs CompilerBisector (`--only bisect`): a wrong Inductor lowering of aten.erf (erf(x) + 0.5; the tests
plant theirs in tanh, silu's decomposition and a post-grad pass) in the bundled 2-layer GPT (`--bisect-model gpt`,
the default) or in the 4-layer MLP above (`mlp`): F.gelu decomposes into erf in both. CompilerBisector runs as
documented in process (`CompilerBisector.do_bisect(fn)`, fn compiling the whole model with the backend it names and
judging the output against eager and float64 as dynstep does); dynstep runs `dynstep.diff` (which names the node,
then ablates its subgraph). Both in fresh processes with fresh Inductor caches; the ratio is printed for the root
cause search alone (`report.root_cause.seconds`) and for the whole diff.

    python bench/diff_vs_minifier.py [--cap 600] [--only time|memory|bisect] [--bisect-model gpt|mlp]
"""

from __future__ import annotations

import argparse
import contextlib
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


def worker(kind: str, width: int, batch: int, bisect_model: str = "gpt") -> dict:
    import torch
    import torch._inductor.config as iconfig

    if kind in ("rootcause", "bisector"):
        return bisect_worker(kind, bisect_model, width, batch)

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


@contextlib.contextmanager
def wrong_erf_lowering(eps: float = 0.5):
    """The planted bug: Inductor lowers aten.erf (what F.gelu decomposes into) to erf(x) + eps."""
    import torch
    import torch._inductor.compile_fx  # noqa: F401  (registers every lowering first: a later import would undo ours)
    from torch._inductor import lowering

    erf = torch.ops.aten.erf.default
    original = lowering.lowerings[erf]
    lowering.lowerings[erf] = lambda *a, **k: lowering.lowerings[torch.ops.aten.add.Tensor](original(*a, **k), eps)
    try:
        yield
    finally:
        lowering.lowerings[erf] = original


def bisect_worker(kind: str, which: str, width: int, batch: int) -> dict:
    import torch

    if which == "gpt":
        from dynstep.front.demo.model import make

        model, x = make(seed=0, layers=2)
    else:
        model, x = model_and_input(width, batch)
    model.eval()
    t0 = time.perf_counter()
    with wrong_erf_lowering(), torch.no_grad():
        out = run_dynstep_root_cause(model, x) if kind == "rootcause" else run_compiler_bisector(model, x)
    out.update(kind=kind, model=which, seconds=time.perf_counter() - t0)
    return out


def run_dynstep_root_cause(model, x) -> dict:
    import dynstep

    report = dynstep.diff(model, x, backend="inductor", ladder=False)
    first, cause = report.first_divergence, report.root_cause
    return {"where": first.where if first else None, "compiles": sum(g.compiles for g in report.graphs),
            "root_cause": cause.sentence if cause else None, "found": bool(cause and cause.detail == "aten.erf"),
            "root_cause_seconds": cause.seconds if cause else None, "root_cause_compiles": cause.compiles if cause else 0}


def run_compiler_bisector(model, x) -> dict:
    import torch
    from torch._inductor.compiler_bisector import CompilerBisector

    from dynstep.eagerdiff.judge import Tolerance, judge

    ref, ref64 = model(x), _fp64(model, x)
    calls = []

    def fn() -> bool:
        torch._dynamo.reset()
        out = torch.compile(model, backend=CompilerBisector.get_backend() or "inductor")(x)
        calls.append(CompilerBisector.get_backend())
        return not judge(out, ref, ref64, Tolerance()).diverged

    result = CompilerBisector.do_bisect(fn)
    return {"result": repr(result), "compiles": len(calls),
            "found": bool(result and result.subsystem == "lowerings")}


def _fp64(model, x):
    import copy

    import torch

    double = copy.deepcopy(model).double()
    return double(x.double() if x.is_floating_point() else x).to(torch.float64)


def spawn(kind: str, width: int, batch: int, cap: float, env_extra: dict, bisect_model: str = "gpt") -> dict:
    cache = tempfile.mkdtemp(prefix="dynstep-bench-")
    env = dict(os.environ, PYTHONPATH=ROOT, TORCHINDUCTOR_CACHE_DIR=cache, **env_extra)
    t0 = time.perf_counter()
    try:
        run = subprocess.run([sys.executable, __file__, "--worker", kind, "--width", str(width),
                              "--batch", str(batch), "--bisect-model", bisect_model], cwd=cache, env=env,
                             capture_output=True, text=True, timeout=cap)
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
    ap.add_argument("--only", choices=("time", "memory", "bisect"))
    ap.add_argument("--bisect-model", choices=("gpt", "mlp"), default="gpt",
                    help="the model the root cause and CompilerBisector search (default: the 2-layer GPT)")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.width, args.batch, args.bisect_model)))
        return
    if args.only in (None, "time"):
        time_to_localize(args)
    if args.only in (None, "memory"):
        memory(args)
    if args.only in (None, "bisect"):
        root_cause_vs_bisector(args)


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


def root_cause_vs_bisector(args: argparse.Namespace) -> None:
    ours = spawn("rootcause", args.width, args.batch, args.cap, {}, args.bisect_model)
    print("dynstep root cause:", json.dumps({k: ours.get(k) for k in (
        "wall", "found", "where", "root_cause", "root_cause_seconds", "root_cause_compiles", "compiles", "rc")}),
        flush=True)
    theirs = spawn("bisector", args.width, args.batch, args.cap, {}, args.bisect_model)
    print("CompilerBisector:  ", json.dumps({k: theirs.get(k) for k in ("wall", "found", "result", "compiles",
                                                                        "timed_out", "rc")}), flush=True)
    if not ours.get("found") or ours.get("root_cause_seconds") is None:
        print("dynstep did not name the planted lowering:", ours.get("stderr_tail"))
        return
    bisector = theirs.get("seconds") or theirs["wall"]
    capped = ">=" if theirs.get("timed_out") else ""
    print(f"root cause vs CompilerBisector ({args.bisect_model}): search {ours['root_cause_seconds']:.1f}s vs "
          f"{bisector:.1f}s -> {capped}{bisector / ours['root_cause_seconds']:.1f}x; whole dynstep.diff "
          f"{ours['seconds']:.1f}s -> {capped}{bisector / ours['seconds']:.1f}x")


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
