"""Cost of CUDA probes inside captured CUDA graphs, against a full-copy probe, in one run.

    python bench/cuda_probe_overhead.py [--json out.json]     # skips (exit 0) without CUDA

Part 1, `kernel`: a hand-captured graph of 8 sin ops with a probe after each, replayed; per
size: the graph without probes (baseline), with dynstep's summary probe (stats reduced on the
device and published by the kernel into a mapped pinned ring: no host callback, no copy node), and
with a full-copy probe (what torch-cudagraph-debug does: the whole tensor D2H into pinned memory,
then a host callback; here dynstep's `record` action, which also reduces stats on the device).
Part 2, `model`: TinyGPT compiled by Inductor with mode="reduce-overhead" (CUDA graph trees),
plain, and through superstep with summary probes on every block's output, both replayed.
Part 3, `read`: the summary probe against one plain read of the same bytes in the same replayed
graph (a `sum` of the tensor, the bandwidth floor a reduction can reach), float32/16/bf16
(issue 13's target: within 2x of that read from 1 Mi elements; <= 4 us per probe at 64).
Part 4, `gpt2`: HF GPT-2 6 x 512, batch 8 x 128, reduce-overhead: plain vs superstep with no
selectors (target <= 1.02) vs summary probes on the six MLP outputs (target <= 1.05).
Part 5, `fused` (not in the default parts): issue 31's chain, statistics fused into Inductor's
Triton kernels, under mode="reduce-overhead" (target <= 1.2x plain at 16 Mi).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch


def time_ms(fn, iters: int = 50, repeats: int = 7) -> float:
    """Median over `repeats` of the mean time of `iters` calls, by CUDA events."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)


def capture(x: torch.Tensor, site: int | None, read: bool = False) -> torch.cuda.CUDAGraph:
    g = torch.cuda.CUDAGraph()
    sink = []
    with torch.cuda.graph(g):
        y = x
        for _ in range(8):
            y = torch.sin(y)
            if site is not None:
                torch.ops.dynstep.probe(y, site)
            if read:
                sink.append(y.sum())   # one read of the same bytes: the floor a reduction can reach
    g.sink = sink  # type: ignore[attr-defined]   # keeps the outputs alive with the graph
    return g


def kernel_part(results: dict) -> None:
    import dynstep
    from dynstep.core.sites import SITES

    def site(actions):
        return SITES.add(kind="value", probe="bench", node="n", target="t", module="", source="bench:1",
                         source_text="", graph="g", actions=actions, capacity=4).id

    print(f"kernel: {torch.cuda.get_device_name()}  torch {torch.__version__}  8 probes per replay")
    print(f"{'elements':>10} {'plain ms':>9} {'summary ms':>11} {'full copy ms':>13} "
          f"{'summary us/probe':>17} {'copy us/probe':>14} {'copy/summary':>13}")
    for n in (64, 1 << 20, 16 << 20):
        x = torch.randn(n, device="cuda")
        with dynstep.session(summaries=4) as s:
            plain = time_ms(capture(x, None).replay)
            summ = time_ms(capture(x, site(("summary",))).replay)
            full = time_ms(capture(x, site(("record",))).replay)
            s.records()  # harvest the rings: the probes did record
        per_s, per_f = (summ - plain) * 1e3 / 8, (full - plain) * 1e3 / 8
        ratio = per_f / max(per_s, 1e-9)
        print(f"{n:>10} {plain:>9.3f} {summ:>11.3f} {full:>13.3f} {per_s:>17.2f} {per_f:>14.2f} {ratio:>13.1f}")
        results.setdefault("kernel", []).append(dict(elements=n, plain_ms=plain, summary_ms=summ, full_copy_ms=full,
                                                     summary_us_per_probe=per_s, copy_us_per_probe=per_f))


def model_part(results: dict) -> None:
    import dynstep
    from dynstep.front.demo.model import make
    from torch._dynamo.utils import counters

    model, idx = make(seed=0, layers=4, dim=64, seq=64)
    model, idx = model.cuda().eval(), idx.cuda()
    rows = {}
    for name, compile_it in (
        ("plain", lambda: torch.compile(model, mode="reduce-overhead")),
        ("probed", lambda: torch.compile(model, backend="superstep", options={
            "probe": ["module:blocks.*"], "inner": "inductor", "mode": "reduce-overhead"})),
    ):
        torch._dynamo.reset()
        counters.clear()
        cm = compile_it()
        with torch.no_grad(), dynstep.session(summaries=64) as s:
            for _ in range(3):
                cm(idx)  # warm-up and recording of the CUDA graph tree
            ms = time_ms(lambda: cm(idx), iters=100)
            recs = s.records()
        skips = counters["inductor"]["cudagraph_skips"]
        rows[name] = dict(ms=ms, cudagraph_skips=skips, probes=len({r.site for r in recs}), records=len(recs))
        print(f"model {name:>6}: {ms * 1e3:8.1f} us/step   cudagraph_skips={skips}   "
              f"probe sites hit={rows[name]['probes']}  summaries taken={len(recs)}")
    probed, plain = rows["probed"], rows["plain"]
    per = (probed["ms"] - plain["ms"]) * 1e3 / max(probed["probes"], 1)
    print(f"model: probed/plain = {probed['ms'] / plain['ms']:.3f}   {per:.2f} us per probe per step")
    results["model"] = dict(rows, ratio=probed["ms"] / plain["ms"], us_per_probe=per)


def read_part(results: dict) -> None:
    import dynstep
    from dynstep.core.sites import SITES

    site = SITES.add(kind="value", probe="bench", node="n", target="t", module="", source="bench:1",
                     source_text="", graph="g", actions=("summary",), capacity=4).id
    print("read: summary probe vs one plain read (sum) of the same tensor, 8 per replay")
    print(f"{'dtype':>9} {'elements':>10} {'summary us':>11} {'read us':>8} {'summary/read':>13}")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (64, 1 << 20, 16 << 20):
            x = torch.randn(n, device="cuda", dtype=dtype)
            with dynstep.session(summaries=4) as s:
                plain = time_ms(capture(x, None).replay)
                summ = time_ms(capture(x, site).replay)
                read = time_ms(capture(x, None, read=True).replay)
                s.records()
            per_s, per_r = (summ - plain) * 1e3 / 8, (read - plain) * 1e3 / 8
            ratio = per_s / max(per_r, 1e-9)
            name = str(dtype).replace("torch.", "")
            print(f"{name:>9} {n:>10} {per_s:>11.2f} {per_r:>8.2f} {ratio:>13.2f}")
            results.setdefault("read", []).append(dict(dtype=name, elements=n, summary_us=per_s, read_us=per_r,
                                                       ratio=ratio))


def gpt2_part(results: dict) -> None:
    import warnings

    import dynstep

    try:
        import transformers
    except ImportError:
        print("gpt2: transformers is not installed; skipped")
        return
    warnings.simplefilter("ignore")
    cfg = transformers.GPT2Config(n_layer=6, n_embd=512, n_head=8, n_positions=128, vocab_size=8192,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).cuda().eval()
    ids = torch.randint(0, 8192, (8, 128), device="cuda")
    rows = {}
    for name, options in (("plain", None), ("superstep", {}),
                          ("mlp probes", {"probe": ["module:transformer.h.*.mlp"]})):
        torch._dynamo.reset()
        if options is None:
            cm = torch.compile(model, mode="reduce-overhead")
        else:
            cm = torch.compile(model, backend="superstep", options={**options, "inner": "inductor",
                                                                      "mode": "reduce-overhead"})
        with torch.no_grad(), dynstep.session(summaries=64):
            for _ in range(3):
                cm(ids)
            rows[name] = time_ms(lambda: cm(ids), iters=50)
        print(f"gpt2 {name:>10}: {rows[name] * 1e3:9.1f} us/step   ratio {rows[name] / rows['plain']:.3f}")
    results["gpt2"] = {k: dict(ms=v, ratio=v / rows["plain"]) for k, v in rows.items()}


def fused_part(results: dict, code_dir: str | None = None) -> None:
    """Issue 31's chain on CUDA: 8 elementwise ops with a summary probe after each (placed by superstep's
    selectors, so the statistics are Inductor reductions in the generated Triton kernels from 16 Ki
    elements: backends/stats_pass.py), compiled with mode="reduce-overhead" and replayed; against the
    same chain without probes, and the probes as one probe kernel per value (DYNSTEP_FUSED_STATS=0)."""
    import contextlib
    import os

    import torch._inductor.config
    from probe_overhead import fresh, fused_stats   # bench/ is the script's folder: on sys.path

    import dynstep
    from torch._dynamo.utils import counters

    def chain(x):
        for i in range(8):
            x = x * 1.0001 + 0.5 if i % 2 else torch.sin(x)
        return x

    print("fused: 8 elementwise ops, a summary probe after each, mode=reduce-overhead, replayed")
    for n in (64, 16 << 20):
        x = torch.randn(n, device="cuda")
        rows = {}
        for name, extern in (("plain", None), ("fused", False), ("fused, no split", False), ("extern", True)):
            torch._dynamo.reset()
            counters.clear()
            if extern is None:
                fn = torch.compile(fresh(chain, f"plain{n}"), mode="reduce-overhead", fullgraph=True)
            else:
                fn = torch.compile(fresh(chain, f"{name}{n}"), backend="superstep", fullgraph=True, options={
                    "probe": ["op:sin", "op:add"], "actions": ["summary"], "inner": "inductor",
                    "mode": "reduce-overhead"})
            # "no split": Inductor's split reductions off while it compiles (a diagnostic; on an H100 it made
            # each whole-value reduction one thread block: 988x plain at 16 Mi, 2026-11-26)
            patch = torch._inductor.config.patch(split_reductions=name != "fused, no split")
            with fused_stats(False) if extern else contextlib.nullcontext():
                with dynstep.session(summaries=4) as s:
                    with patch:
                        if code_dir and name != "plain" and n > 4096:   # the generated code, for reading
                            from torch._inductor.utils import run_and_get_code

                            _, sources = run_and_get_code(fn, x)
                            path = os.path.join(code_dir, f"chain_{name.replace(', ', '_').replace(' ', '_')}.py")
                            with open(path, "w", encoding="utf-8") as f:
                                f.write("\n\n# ----\n\n".join(sources))
                        else:
                            fn(x)
                    for _ in range(2):
                        fn(x)
                    ms = time_ms(lambda: fn(x), iters=20 if n > 4096 else 100)
                    hits = len(s.records())
            rows[name] = dict(ms=ms, ratio=ms / rows["plain"]["ms"] if rows else 1.0, hits=hits,
                              cudagraph_skips=int(counters["inductor"]["cudagraph_skips"]))
            print(f"fused {n:>9} {name:>15}: {ms * 1e3:9.1f} us/call  {rows[name]['ratio']:.3f}x plain  "
                  f"hits {hits}  cudagraph_skips {rows[name]['cudagraph_skips']}", flush=True)
        results.setdefault("fused", []).append(dict(elements=n, **rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--parts", default="kernel,model,read,gpt2", help="of kernel, model, read, gpt2, fused")
    ap.add_argument("--code", help="fused: write the code Inductor generated for the probed chain into this folder")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("cuda_probe_overhead: no CUDA device; skipped")
        return 0
    from dynstep import _compat
    from dynstep.probe import registration

    registration.ensure()   # the native kernels

    if not _compat.has_kernel("dynstep::probe", "CUDA"):
        print("cuda_probe_overhead: no CUDA kernel registered for dynstep::probe (see `dynstep doctor`)")
        return 1
    results: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for part in args.parts.split(","):
        if part == "fused":
            fused_part(results, args.code)
            continue
        {"kernel": kernel_part, "model": model_part, "read": read_part, "gpt2": gpt2_part}[part](results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
