"""What the flight recorder costs on a GPT-2-sized training step, against the plain compiled step in the
same run, and how fast a trigger reaches the disk.

    python bench/flight_overhead.py                  # the issue's model: 6 layers x 256, batch 8 x 128 (long)
    python bench/flight_overhead.py --quick          # a small model and few rounds: shows it works
    python bench/flight_overhead.py --device cuda    # CUDA, mode="reduce-overhead" (probes inside the graphs)
    python bench/flight_overhead.py --json out.json
    python bench/flight_overhead.py --device cuda --variants plain,every,every-extern --profile --no-dump
                                                     # where each variant's step time goes (torch.profiler)

Measured (one torch thread on CPU; medians of interleaved rounds, every other one in reverse order; each
variant its own model copy with the same initial weights; each step = forward + backward + AdamW):
  plain     torch.compile(model) (Inductor; on CUDA with mode="reduce-overhead")
  every     backend="superstep", options={"flight": {"select": ["*"]}}: every node and its gradient
  modules   the same with select=["module:**"]: what each module returns, and its gradient
  every-extern  (only when asked, --variants) `every` compiled with DYNSTEP_FUSED_STATS=0: a probe kernel per value
  ring      the flight recorder's sites and the most its rings can hold (bytes per probed value per step)
  dump      trigger to dump on disk for K = 64: after K + 1 steps of `every`, `dynstep.flight.dump()` timed
            (drain the native rings, encode the window, write the recording, rename it into place)
On CUDA it also counts Inductor's cudagraph skips (0 means the probes stayed inside the captured graphs).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "dynstep-inductor-cache"))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

FULL = dict(layers=6, dim=256, heads=8, batch=8, seq=128, vocab=50257, rounds=5)
QUICK = dict(layers=2, dim=64, heads=4, batch=2, seq=32, vocab=512, rounds=3)
K = 64


def gpt2(cfg: dict, device: str) -> tuple[torch.nn.Module, torch.Tensor]:
    import transformers

    config = transformers.GPT2Config(n_layer=cfg["layers"], n_embd=cfg["dim"], n_head=cfg["heads"],
                                     n_positions=cfg["seq"], vocab_size=cfg["vocab"], bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).to(device).train()
    ids = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]), device=device)
    return model, ids


def variants(cfg: dict, device: str, dumps: str, chosen: tuple[str, ...] = ("plain", "every", "modules")) -> dict[str, object]:
    """name -> a training step closure; every variant trains its own copy of the same model."""
    from probe_overhead import fused_stats   # bench/ is the script's folder: on sys.path
    mode = {"mode": "reduce-overhead"} if device == "cuda" else {}
    base, ids = gpt2(cfg, device)
    flight = {"steps": K, "path": dumps, "on": ["nonfinite"]}
    specs = {"plain": dict(backend="inductor", **mode),
             "every": dict(backend="superstep", options={**mode, "flight": {**flight, "select": ["*"]}}),
             "modules": dict(backend="superstep", options={**mode, "flight": {**flight, "select": ["module:**"]}})}
    # every node again, compiled with DYNSTEP_FUSED_STATS=0 (the probe kernel for each value); options of its own
    # (another dump folder) make it a compile of its own, not Dynamo's cached code for `every`
    specs["every-extern"] = dict(backend="superstep", options={
        **mode, "flight": {**flight, "path": os.path.join(dumps, "extern"), "select": ["*"]}})
    specs = {name: specs[name] for name in chosen}
    steps = {}
    for name, kwargs in specs.items():
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        compiled = torch.compile(model, **kwargs)

        def step(compiled=compiled, opt=opt, extern=name == "every-extern") -> None:
            # DYNSTEP_FUSED_STATS is read when each graph is compiled (its first call)
            with fused_stats(False) if extern else contextlib.nullcontext():
                compiled(ids, labels=ids, use_cache=False).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        steps[name] = step
    return steps


def device_us(event) -> float:
    """A profiler event's own device time, in µs (0 where this torch's events lack the field)."""
    return getattr(event, "self_device_time_total", 0)


def profiled(steps: dict, device: str) -> dict[str, dict[str, float]]:
    """Where a step's time goes: the host's time to enqueue it (no wait), its wall time, and on CUDA the
    kernels the device ran (count and busy time per step, the costliest by name) from torch.profiler."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    out = {}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for name, fn in steps.items():
        sync()
        enqueue, wall = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            enqueue.append(time.perf_counter() - t0)
            sync()
            wall.append(time.perf_counter() - t0)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities) as prof:
            for _ in range(3):
                fn()
            sync()
        events = prof.key_averages()
        dev = [e for e in events if e.device_type == DeviceType.CUDA]
        busy = sum(device_us(e) for e in dev) / 3e3
        kernels = sum(e.count for e in dev) / 3
        row = {"enqueue_ms": statistics.median(enqueue) * 1e3, "wall_ms": statistics.median(wall) * 1e3,
               "device_busy_ms": busy, "device_ops_per_step": kernels}
        out[name] = row
        print(f"[profile] {name:>12}: enqueue {row['enqueue_ms']:.2f} ms, wall {row['wall_ms']:.2f} ms, "
              f"device busy {busy:.2f} ms in {kernels:.0f} kernels/copies per step", flush=True)
        for e in sorted(dev, key=device_us, reverse=True)[:14]:
            print(f"    {device_us(e) / 3e3:8.3f} ms/step {e.count / 3:7.0f}x  {e.key[:110]}")
        cpu = sorted((e for e in events if e.device_type == DeviceType.CPU), key=lambda e: -e.self_cpu_time_total)[:10]
        for e in cpu:
            print(f"    cpu {e.self_cpu_time_total / 3e3:8.3f} ms/step {e.count / 3:7.0f}x  {e.key[:100]}")
    return out


def timed(fn, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0
    finally:
        gc.enable()


def overhead(steps: dict, rounds: int, device: str) -> dict[str, dict[str, float]]:
    for name, fn in steps.items():   # compile and warm up (cudagraphs record on the first calls)
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        print(f"  {name:>8}: compiled and warmed up in {time.perf_counter() - t0:.0f} s", flush=True)
    ratios: dict[str, list[float]] = {n: [] for n in steps}
    seconds: dict[str, list[float]] = {n: [] for n in steps}
    order = list(steps)
    for r in range(rounds):   # every other round in reverse order: no variant always runs right after plain
        times = {name: timed(steps[name], device) for name in (order if r % 2 == 0 else order[::-1])}
        for name, t in times.items():
            seconds[name].append(t)
            ratios[name].append(t / times["plain"])
    return {n: {"seconds": statistics.median(seconds[n]), "ratio": statistics.median(ratios[n])} for n in steps}


def ring_and_dump(steps: dict, device: str) -> dict[str, float]:
    import dynstep

    recorder = dynstep.flight.current()
    for _ in range(K + 1):          # fill the window: K steps before the trigger's and its own
        steps["every"]()
    if device == "cuda":
        torch.cuda.synchronize()
    held, per_step = recorder.memory()
    t0 = time.perf_counter()
    path = dynstep.flight.dump("bench: trigger to dump")
    seconds = time.perf_counter() - t0
    rec = dynstep.load(path, tensors=False)
    return {"sites": len(recorder.rings), "ring_bytes_max": held, "bytes_per_value_per_step": per_step,
            "dump_seconds": seconds, "dump_hits": len(rec), "dump_steps": len({s.step for s in rec.all()})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small model, few rounds (shows it works)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--variants", default="plain,every,modules",
                    help="of plain, every, modules, every-extern (every with DYNSTEP_FUSED_STATS=0); plain first")
    ap.add_argument("--profile", action="store_true", help="also say where each variant's step time goes")
    ap.add_argument("--no-dump", action="store_true", help="skip the ring and trigger-to-dump part")
    args = ap.parse_args()
    chosen = tuple(args.variants.split(","))
    if chosen[0] != "plain" or not set(chosen) <= {"plain", "every", "modules", "every-extern"}:
        ap.error(f"--variants: plain first, then any of every, modules, every-extern (got {args.variants!r})")
    if args.device == "cpu":
        torch.set_num_threads(1)
    cfg = dict(QUICK if args.quick else FULL)
    cfg["rounds"] = args.rounds or cfg["rounds"]
    print(f"flight recorder overhead: GPT-2 {cfg['layers']} layers x {cfg['dim']}, batch {cfg['batch']} x "
          f"{cfg['seq']}, AdamW, {args.device}, torch {torch.__version__}", flush=True)
    with tempfile.TemporaryDirectory() as dumps:
        steps = variants(cfg, args.device, dumps, chosen)
        skips = _cudagraph_skips_reset() if args.device == "cuda" else None
        figures = {"config": cfg, "device": args.device, "steps": overhead(steps, cfg["rounds"], args.device)}
        if skips is not None:
            figures["cudagraph_skips"] = _cudagraph_skips_reset()
        for name, row in figures["steps"].items():
            print(f"{name:>12}: {row['seconds'] * 1e3:9.1f} ms/step   {row['ratio']:.3f}x plain", flush=True)
        if args.profile:
            figures["profile"] = profiled(steps, args.device)
        if not args.no_dump and "every" in steps:
            figures["ring"] = ring_and_dump(steps, args.device)
    r = figures.get("ring")
    if r:
        print(f"    ring: {r['sites']} probed values and gradients, at most {r['ring_bytes_max'] / 2**20:.1f} MiB "
              f"({r['bytes_per_value_per_step']} bytes per value per step, K = {K})")
        print(f"    dump: trigger to disk {r['dump_seconds']:.3f} s for {r['dump_hits']} hits over {r['dump_steps']} steps")
    if "cudagraph_skips" in figures:
        print(f"    cudagraph_skips: {figures['cudagraph_skips']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)


def _cudagraph_skips_reset() -> int:
    from torch._dynamo.utils import counters   # what bench/cuda_probe_overhead.py reads too

    skips = int(counters["inductor"]["cudagraph_skips"])
    counters["inductor"].clear()
    return skips


if __name__ == "__main__":
    main()
