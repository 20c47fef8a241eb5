"""What probes cost under CPU Inductor, each figure against a baseline taken in the same run.

    python bench/probe_overhead.py               # every part (about five minutes on 2 cores, and the
                                                 # training part's compiles: about 15 more)
    python bench/probe_overhead.py --quick       # fewer rounds
    python bench/probe_overhead.py --only model|kernel|training|statistics|record|calls|tokens [--json out.json]

Parts (one torch thread throughout; timings are medians of interleaved rounds):
  model   TinyGPT (4 layers) through superstep: plain torch.compile, superstep with no options,
          probes switched off with dynstep.probes.disabled(), summary probes, record probes.
  kernel  a graph of 8 elementwise ops with a probe after each, on 64 and 16 Mi float32 elements:
          unprobed, probes switched off, probe sites with no action (the op is still called),
          summary, record (probes placed in the code, each with its own Dynamo guards), and
          summary probes placed by superstep's selectors instead (computed inside Inductor's kernels
          at 16 Mi elements, backends/stats_pass.py; "superstep summary, extern": the same with
          DYNSTEP_FUSED_STATS=0, each value handed to the probe op), and no probe but the 8 values
          returned as outputs (what materialising them costs); for three ways of running the probe, each in its own process with
          its own unprobed baseline: the Python kernel (DYNSTEP_NATIVE=0), the native kernel
          called as Inductor writes extern ops (DYNSTEP_FAST_PROBE=0), and the native kernel
          called directly from Inductor's wrapper (the default, dynstep/probe/fastpath.py).
  training  a training step (forward + backward of a loss, no optimizer) of TinyGPT and of
          HF GPT-2 built from a config, Inductor: plain torch.compile, and superstep with summary probes
          on every node or on module outputs only, grads=True, fused (the default) and extern
          (DYNSTEP_FUSED_STATS=0); for the fused ones, the kernels each probed graph got with and
          without its probes (each of those graphs compiled twice: most of this part's time).
  statistics  what each of the fused statistics costs (diagnostic): the kernel part's 16 Mi chain with
          superstep's fused summary probes, compiled again with some statistics replaced by constants
          (the counts, min/max, the float64 sums; only the sum; none), each against the unprobed call.
          The published numbers of those variants are wrong on purpose: not a mode users get.
  record  one record hit on 16 Mi float32 against `dst.copy_(x)` of the same bytes.
  calls   where an eager probe call's time goes: torch.ops (Python -> dispatcher) vs the direct
          entry, with no action and with summary, against a Python no-op call.
  tokens  the effect-token plumbing: summary probes on the 8-op graph (64 elements) inserted by
          superstep under inner eager, aot_eager (superstep drops AOTAutograd's run-time tokens:
          dynstep.backends.probe_pass.direct_probe_calls) and inductor (which removes them itself), and the same
          probes hand-placed in a function compiled by plain aot_eager, where each probe still
          runs through torch's `with_effects`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "dynstep-inductor-cache"))

import torch  # noqa: E402

N_OPS = 8
MODEL_PROBES = ["module:blocks.*", "module:blocks.*.attn", "module:blocks.*.mlp"]
PATHS = {"python": {"DYNSTEP_NATIVE": "0"}, "native-op": {"DYNSTEP_FAST_PROBE": "0"}, "native-direct": {}}


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, iters: int,
                probes_off: frozenset[str] = frozenset()) -> dict[str, float]:
    """Seconds per call of each variant: the median over `rounds` of (round mean / the first
    variant's mean in the same round) times the first variant's median. Variants alternate within
    a round, so a ratio compares calls made moments apart and machine drift cancels. Variants
    named in `probes_off` run with dynstep.probes switched off for the whole timing."""
    from dynstep.probe import switch as probes

    def timed(name: str, fn: Callable[[], object], n: int) -> float:
        off = name in probes_off
        if off:
            probes.disable()
        gc.collect()
        gc.disable()  # as timeit does: one variant's garbage must not be collected in another's time
        try:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            return (time.perf_counter() - t0) / n
        finally:
            gc.enable()
            if off:
                probes.enable()

    for name, fn in fns.items():
        timed(name, fn, 2)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(timed(name, fn, iters))
    base_name = next(iter(fns))
    base = samples[base_name]
    base_med = statistics.median(base)
    return {k: base_med * statistics.median(t / b for t, b in zip(v, base)) for k, v in samples.items()}


def sites(actions: tuple[str, ...], n: int = N_OPS) -> list[int]:
    from dynstep.core.sites import SITES

    return [SITES.add(kind="value", probe="bench", node=f"n{i}", target="t", module="", source="bench:1",
                      source_text="", graph="bench", actions=actions, capacity=1).id for i in range(n)]


# -- model: TinyGPT through superstep -------------------------------------------------------------
def part_model(quick: bool) -> dict:
    import dynstep
    from dynstep.front.demo.model import make

    model, idx = make(layers=4)
    model.eval()
    builds = {
        "plain": lambda: torch.compile(model),
        "superstep": lambda: torch.compile(model, backend="superstep"),
        "summary": lambda: torch.compile(model, backend="superstep",
                                         options={"probe": MODEL_PROBES, "actions": ["summary"], "record": 4}),
        "record": lambda: torch.compile(model, backend="superstep",
                                        options={"probe": MODEL_PROBES, "actions": ["record"], "record": 4}),
    }
    with torch.no_grad(), dynstep.session(summaries=64):
        compiled = {k: b() for k, b in builds.items()}
        calls = {k: (lambda f=f: f(idx)) for k, f in compiled.items()}
        # "probes off" (the summary model, switched off) right after its baseline in every round
        fns = {"plain": calls["plain"], "probes off": calls["summary"], **calls}
        med = interleaved(fns, 9 if quick else 41, 50, probes_off=frozenset({"probes off"}))
    return {"probes_per_step": 3 * 4, "us": {k: v * 1e6 for k, v in med.items()}}


def print_model(res: dict) -> None:
    us, n = res["us"], res["probes_per_step"]
    print(f"\n[model] TinyGPT 4 layers, dim 32, seq 16, batch 2, inference, {n} probes per step")
    print(f"{'variant':<12} {'us/step':>10} {'ratio':>7} {'us/probe':>9}")
    for k in ("plain", "superstep", "probes off", "summary", "record"):
        per = (us[k] - us["superstep"]) / n if k in ("summary", "record") else None
        print(f"{k:<12} {us[k]:10.1f} {us[k] / us['plain']:7.3f} {'' if per is None else f'{per:9.2f}'}")


# -- kernel: 8 elementwise ops, a probe after each --------------------------------------------------
def eight_ops(site_ids: list[int] | None, tag: str, backend: str = "inductor"):
    from dynstep.probe import switch as probes

    def f(x):
        for i in range(N_OPS):
            x = x * 1.0001 + 0.5 if i % 2 else torch.sin(x)
            if site_ids is not None and probes.ENABLED:  # what TensorProbe does: a Dynamo guard
                torch.ops.dynstep.probe(x, site_ids[i])
        return x

    return torch.compile(fresh(f, tag), backend=backend, fullgraph=True)


def fresh(f: Callable, tag: str) -> Callable:
    """`f` with a code object of its own: Dynamo caches per code object, and one variant must not
    pay for checking the guards of the others (nor turn dynamic when another size is compiled)."""
    code = f.__code__.replace(co_name=f"{f.__name__}_{tag.replace(' ', '_')}")
    return types.FunctionType(code, f.__globals__, code.co_name, None, f.__closure__)


def eight_values(x):
    values = []
    for i in range(N_OPS):
        x = x * 1.0001 + 0.5 if i % 2 else torch.sin(x)
        values.append(x)
    return tuple(values)


def part_kernel(quick: bool) -> dict:
    import dynstep

    out: dict = {}
    sizes = {"small": (64, 11 if quick else 61, 200), "large": (16 * 1024 * 1024, 2 if quick else 5, 1)}
    for label, (n, rounds, iters) in sizes.items():
        x = torch.randn(n)
        compiled = {"unprobed": eight_ops(None, "unprobed")}
        for actions in [(), ("summary",), ("record",)]:
            name = "+".join(actions) or "no action"
            compiled[name] = eight_ops(sites(actions), name)
        # the same 8 probes placed by superstep (selectors) rather than by hand in the code: fused into
        # Inductor's kernels (values of FUSE_MIN_NUMEL elements or more), and each handed to the probe op
        compiled["superstep summary"] = eight_ops(None, "superstep", dynstep.superstep(
            inner="inductor", probe=["op:sin", "op:add"], actions=["summary"]))
        with fused_stats(False):
            compiled["superstep summary, extern"] = eight_ops(None, "superstep_extern", dynstep.superstep(
                inner="inductor", probe=["op:sin", "op:add"], actions=["summary"]))
            compiled["superstep summary, extern"](x)   # compiled now, while the switch is off
        # no probe, the 8 values returned instead: what it costs Inductor to materialise them
        compiled["values as outputs"] = torch.compile(fresh(eight_values, label), backend="inductor",
                                                      fullgraph=True)
        calls = {k: (lambda f=f: f(x)) for k, f in compiled.items()}
        # "probes off" (the summary function, switched off) right after its baseline in every round
        fns = {"unprobed": calls["unprobed"], "probes off": calls["summary"], **calls}
        if label == "large" and os.environ.get("DYNSTEP_NATIVE") == "0":
            for k in ("summary", "superstep summary, extern"):  # seconds per call; record shows the scale
                fns.pop(k)
        with dynstep.session(summaries=4):
            med = interleaved(fns, rounds, iters, probes_off=frozenset({"probes off"}))
        out[label] = {k: v * 1e6 for k, v in med.items()}
    return out


class fused_stats:
    """DYNSTEP_FUSED_STATS for the compiles inside the block (read when superstep compiles a graph)."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __enter__(self) -> None:
        self.saved = os.environ.get("DYNSTEP_FUSED_STATS")
        os.environ["DYNSTEP_FUSED_STATS"] = "1" if self.on else "0"

    def __exit__(self, *exc: object) -> None:
        if self.saved is None:
            os.environ.pop("DYNSTEP_FUSED_STATS", None)
        else:
            os.environ["DYNSTEP_FUSED_STATS"] = self.saved


# -- training: TinyGPT and HF GPT-2, forward + backward, probes on every node or on module outputs -----
def tinygpt(quick: bool):
    from dynstep.front.demo.model import make

    dim, seq, batch = (64, 32, 2) if quick else (256, 128, 8)
    model, _ = make(seed=0, dim=dim, seq=seq, layers=2 if quick else 4)
    idx = torch.randint(0, model.tok.num_embeddings, (batch, seq))
    return model, idx, ["module:blocks.*", "module:blocks.*.attn", "module:blocks.*.mlp"]


def gpt2(quick: bool):
    import transformers

    dim, seq, batch = (64, 32, 2) if quick else (256, 128, 8)
    cfg = transformers.GPT2Config(n_layer=2 if quick else 6, n_embd=dim, n_head=4, n_positions=seq, vocab_size=512,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    idx = torch.randint(0, 512, (batch, seq))
    return model, idx, ["module:transformer.h.*", "module:transformer.h.*.attn", "module:transformer.h.*.mlp"]


def logits_of(model, idx):
    out = model(idx)
    return out.logits if hasattr(out, "logits") else out


def training_step(model, idx, backend, tag: str) -> Callable[[], None]:
    import copy

    m = copy.deepcopy(model)
    forward = torch.compile(fresh(logits_of, tag), backend=backend)

    def step() -> None:
        m.zero_grad(set_to_none=True)
        forward(m, idx).float().pow(2).mean().backward()

    return step


def part_training(quick: bool, models: tuple[str, ...] = ("TinyGPT", "GPT-2"), extern: bool = True,
                  rounds: int | None = None) -> dict:
    import dynstep
    from dynstep.backends import kernel_counts
    from dynstep.recording.compile_log import COMPILE_LOG
    from dynstep.recording.facts import KernelCount, to_json

    out = {}
    for name, build in (("TinyGPT", tinygpt), ("GPT-2", gpt2)):
        if name not in models:
            continue
        model, idx, modules = build(quick)
        steps = {"plain": training_step(model, idx, "inductor", f"{name}_plain")}
        counts: dict[str, list] = {}
        for fused in (True, False) if extern else (True,):
            for label, probe in (("every node", ["*"]), ("module outputs", modules)):
                key = f"{label}{'' if fused else ', extern'}"
                backend = dynstep.superstep(probe=probe, grads=True)
                mark = COMPILE_LOG.mark()
                measure = kernel_counts.measure() if fused else contextlib.nullcontext()   # each compile twice
                with fused_stats(fused), measure:
                    steps[key] = training_step(model, idx, backend, f"{name}_{key}")
                    steps[key]()   # compiled (forward and backward) now, while the switch holds
                counts[key] = to_json([e for e in COMPILE_LOG.entries()[mark:] if isinstance(e, KernelCount)])
        with dynstep.session(summaries=4):
            med = interleaved(steps, rounds or (5 if quick else 15), 2 if quick else 5)
        out[name] = {"ms": {k: v * 1e3 for k, v in med.items()}, "kernels": counts, "shape": list(idx.shape)}
    return out


def print_training(res: dict) -> None:
    for name, r in res.items():
        ms = r["ms"]
        print(f"\n[training] {name}, batch {r['shape'][0]} x {r['shape'][1]}, forward + backward, Inductor, grads=True")
        for k, v in ms.items():
            kernels = "; ".join(f"{c['phase']} {c['kernels']} kernels ({c['kernels'] - c['unprobed']:+d}), "
                                f"{c['fused']} fused, {c['extern']} extern" for c in r["kernels"].get(k, []))
            print(f"  {k:<24} {v:10.2f} ms  {v / ms['plain']:7.3f}x plain   {kernels}")


def kernel_in_child(path: str, quick: bool) -> dict:
    env = {**os.environ, **PATHS[path], "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="dynstep-bench-")}
    cmd = [sys.executable, __file__, "--child-kernel"] + (["--quick"] if quick else [])
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(run.stdout.splitlines()[-1])


def print_kernel(by_path: dict) -> None:
    print(f"\n[kernel] {N_OPS} elementwise ops, a probe after each ({N_OPS} probes per call), Inductor")
    print(f"{'size':<6} {'probe path':<14} {'variant':<26} {'call us':>12} {'us/probe':>10} {'ratio':>7}")
    for label in ("small", "large"):
        for path, res in by_path.items():
            row = res[label]
            base = row["unprobed"]
            for k in ("unprobed", "probes off", "values as outputs", "no action", "summary", "record",
                      "superstep summary", "superstep summary, extern"):
                if k not in row:
                    continue
                per = (row[k] - base) / N_OPS
                print(f"{label:<6} {path:<14} {k:<26} {row[k]:12.1f} "
                      f"{'' if k in ('unprobed', 'probes off') else f'{per:10.2f}':>10} {row[k] / base:7.3f}")


# -- statistics: what each fused statistic adds to the 16 Mi chain (diagnostic) --------------------------
STAT_PARTS = {"all": (), "no NaN/Inf counts": (4, 5), "no min/max": (2, 3), "no float64 sums": (0, 1),
              "the sum only": (1, 2, 3, 4, 5), "none (publish only)": (0, 1, 2, 3, 4, 5)}


def part_statistics(quick: bool) -> dict:
    """Each variant's `stats_pass._statistics` returns the real statistics of a float value
    ([sum, sumsq, min, max, nans, bad]) with the parts it leaves out replaced by constants, so Inductor
    computes only the rest; the publish call and the run's structure stay."""
    import dynstep
    from dynstep.backends import stats_pass

    real = stats_pass._statistics

    def without(drop: tuple[int, ...]) -> Callable:
        def statistics(emit, x):
            out = real(emit, x)
            dev = x.meta["val"].device
            return [emit(torch.ops.aten.full.default, [], 0, dtype=node.meta["val"].dtype, device=dev,
                         pin_memory=False) if i in drop else node for i, node in enumerate(out)]
        return statistics

    x = torch.randn(16 * 1024 * 1024)
    fns: dict[str, Callable[[], object]] = {}
    unprobed = eight_ops(None, "stat_unprobed")
    fns["unprobed"] = lambda: unprobed(x)
    with dynstep.session(summaries=4):
        try:
            for i, (name, drop) in enumerate(STAT_PARTS.items()):
                stats_pass._statistics = without(drop)
                f = eight_ops(None, f"stat_{i}", dynstep.superstep(inner="inductor", probe=["op:sin", "op:add"],
                                                                   actions=["summary"]))
                f(x)   # compiled now, with this variant's statistics
                fns[name] = lambda f=f: f(x)
        finally:
            stats_pass._statistics = real
        med = interleaved(fns, 3 if quick else 5, 1)
    return {k: v * 1e3 for k, v in med.items()}


def print_statistics(ms: dict) -> None:
    print("\n[statistics] the 16 Mi chain, superstep's fused summary probes with parts of the statistics left out")
    for k, v in ms.items():
        print(f"  {k:<22} {v:9.1f} ms  {v / ms['unprobed']:6.3f}x unprobed")


# -- record vs copy, and the call paths ------------------------------------------------------------
def part_record(quick: bool) -> dict:
    import dynstep
    from dynstep.probe import fastpath

    x = torch.randn(16 * 1024 * 1024)
    dst = torch.empty_like(x)
    (rec,) = sites(("record",), 1)
    with dynstep.session(summaries=1):
        med = interleaved({"record": lambda: fastpath.probe(x, rec), "copy": lambda: dst.copy_(x)},
                          7 if quick else 15, 3)
    return {"bytes": x.numel() * 4, "record_ms": med["record"] * 1e3, "copy_ms": med["copy"] * 1e3,
            "ratio": med["record"] / med["copy"]}


def part_calls(quick: bool) -> dict:
    import dynstep
    from dynstep.ops import native

    mod = native.get()
    x = torch.randn(64)
    (bare,) = sites((), 1)
    (summ,) = sites(("summary",), 1)
    op = torch.ops.dynstep.probe.default
    fns = {"python no-op call": lambda: None, "torch.sin(x)": lambda: torch.sin(x),
           "torch.ops, no action": lambda: op(x, bare), "direct, no action": lambda: mod.probe(x, bare),
           "torch.ops, summary": lambda: op(x, summ), "direct, summary": lambda: mod.probe(x, summ)}
    with dynstep.session(summaries=4):
        med = interleaved(fns, 5 if quick else 9, 5000)
    return {k: v * 1e6 for k, v in med.items()}


def part_tokens(quick: bool) -> dict:
    """Per-probe cost (summary, 64 elements) by inner compiler, superstep inserting the probes,
    and for hand-placed probes compiled by plain aot_eager (torch's own token plumbing). Each
    probed variant is timed in rounds against its own unprobed compile."""
    import dynstep

    x = torch.randn(64)
    opts = {"probe": ["op:sin", "op:add"], "actions": ["summary"]}  # 8 probes: 4 sin, 4 add
    pairs = {f"superstep, inner={inner}": (inner, eight_ops(None, f"{inner}_superstep",
                                                             dynstep.superstep(inner=inner, **opts)))
             for inner in ("eager", "aot_eager", "inductor")}
    pairs["hand-placed, plain aot_eager"] = ("aot_eager", eight_ops(sites(("summary",)), "hand", "aot_eager"))
    out = {}
    with dynstep.session(summaries=4):
        for name, (inner, probed) in pairs.items():
            plain = eight_ops(None, f"{inner}_plain_{len(out)}", inner)
            med = interleaved({"plain": lambda f=plain: f(x), "probed": lambda f=probed: f(x)},
                              11 if quick else 61, 200)
            out[name] = (med["probed"] - med["plain"]) / N_OPS * 1e6
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=("model", "kernel", "training", "statistics", "record", "calls", "tokens"))
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--models", default="TinyGPT,GPT-2",
                    help="training part: which models (comma-separated: TinyGPT, GPT-2); the whole part takes "
                         "over 30 minutes on 2 cores")
    ap.add_argument("--no-extern", action="store_true",
                    help="training part: only the fused variants against plain (half the compiles)")
    ap.add_argument("--rounds", type=int, help="training part: interleaved rounds (default 15)")
    ap.add_argument("--child-kernel", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from dynstep.ops import native
    from dynstep.probe import fastpath
    from dynstep.probe import registration as kernel

    kernel.ensure()   # the native kernel, unless DYNSTEP_NATIVE=0
    if args.child_kernel:
        print(json.dumps(part_kernel(args.quick)))
        return
    if native.get() is None:
        sys.exit(f"native kernel not loaded: {native.status().reason}")
    print(f"probe_overhead: torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} cores, 1 thread; "
          f"wrapper: {fastpath.status()}")
    results: dict = {}
    want = (lambda p: args.only in (None, p))
    if want("model"):
        results["model"] = part_model(args.quick)
        print_model(results["model"])
    if want("kernel"):
        results["kernel"] = {p: kernel_in_child(p, args.quick) for p in PATHS}
        print_kernel(results["kernel"])
    if want("training"):
        models = tuple(m.strip() for m in args.models.split(",") if m.strip())
        unknown = set(models) - {"TinyGPT", "GPT-2"}
        if unknown:
            sys.exit(f"--models: unknown {sorted(unknown)}; expected TinyGPT and/or GPT-2")
        results["training"] = part_training(args.quick, models, extern=not args.no_extern, rounds=args.rounds)
        print_training(results["training"])
    if want("statistics"):
        results["statistics"] = part_statistics(args.quick)
        print_statistics(results["statistics"])
    if want("record"):
        rc = results["record"] = part_record(args.quick)
        print(f"\n[record] one 16 Mi float32 tensor ({rc['bytes'] >> 20} MiB): record {rc['record_ms']:.2f} ms, "
              f"dst.copy_(x) {rc['copy_ms']:.2f} ms -> record/copy {rc['ratio']:.3f}")
    if want("calls"):
        calls = results["calls"] = part_calls(args.quick)
        print("\n[calls] one eager call on 64 float32 elements")
        for k, v in calls.items():
            print(f"  {k:<22} {v:7.3f} us")
    if want("tokens"):
        tokens = results["tokens"] = part_tokens(args.quick)
        print(f"\n[tokens] cost per summary probe (64 elements) in an {N_OPS}-probe graph")
        for k, v in tokens.items():
            print(f"  {k:<30} {v:7.2f} us/probe")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
