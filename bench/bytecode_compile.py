"""What compiling costs inside `dynstep.step_bytecode()`, against the same compile outside it.

    python bench/bytecode_compile.py [--backend inductor] [--layers 2] [--rounds 3]

The function compiled is the bundled TinyGPT's forward, a graph break, and more model code after it
(so Dynamo compiles a resume function while the stepper's tracked frame is running, the case where a
trace function installed for the whole program used to see every Python call of Dynamo and
Inductor). Each round compiles it from scratch (torch._dynamo.reset(), Inductor's caches off) in
each setting, rounds interleaved so machine noise hits all alike; the median of each is printed
and the ratios to the plain compile:

  outside             torch.compile(fn, backend=B), first call (compile + one run)
  inside              the same compile inside step_bytecode(commands="c", route=False): only the
                      stepper's hooks differ (code-object callback, settrace / sys.monitoring);
                      target <= 1.10 (issue 30)
  inside, stepping    step_bytecode(commands="c") as users open it: every graph also compiled with
                      step points (superstep step=True compiles a second variant with a stop point
                      after every node, what `s` into the graph needs): the price of stepping into
                      graphs, not of tracing
  global trace (old)  the same compile under a trace function installed for the whole program that
                      asks "is this frame tracked?" on every call, as the stepper did before issue 30

Run it alone on an idle machine for figures (docs/BENCHMARKS.md); `--backend eager --rounds 1`
checks that it works in seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"      # every round compiles for real

import torch  # noqa: E402

import dynstep  # noqa: E402
from dynstep.front.demo.model import make  # noqa: E402
from dynstep.step.stepper import STEPPER  # noqa: E402


def workload(layers: int):
    model, idx = make(layers=layers)
    model.eval()

    def forward_twice(x):
        h = model(x)
        torch._dynamo.graph_break()          # a resume function, compiled while the frame runs
        return model(x).sum() + h.mean()

    return forward_twice, idx


def compile_seconds(fn, idx, backend: str, setting: str) -> float:
    torch._dynamo.reset()
    STEPPER.reset()
    compiled = torch.compile(fn, backend=backend)
    start = time.perf_counter()
    with torch.no_grad():
        if setting == "outside":
            compiled(idx)
        elif setting == "inside":
            with dynstep.step_bytecode(commands="c", route=False):
                compiled(idx)
        elif setting == "inside, stepping":
            with dynstep.step_bytecode(commands="c"):
                compiled(idx)
        else:
            with _global_trace():
                compiled(idx)
    return time.perf_counter() - start


class _global_trace:
    """The stepper's old 3.11 trace function: called on every Python call, untracked frames untraced."""

    def __enter__(self) -> None:
        tracked: set = set()

        def old_global(frame, event, arg):
            if event != "call" or frame.f_code not in tracked:
                return None
            return None

        self.previous = sys.gettrace()
        sys.settrace(old_global)

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self.previous)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    fn, idx = workload(args.layers)
    settings = ["outside", "inside", "inside, stepping", "global trace (old)"]
    times: dict[str, list[float]] = {s: [] for s in settings}
    for setting in settings:      # once untimed: imports (the front end's at the first stop) and the toolchain
        compile_seconds(fn, idx, args.backend, setting)
    for _ in range(args.rounds):
        for setting in settings:
            times[setting].append(compile_seconds(fn, idx, args.backend, setting))
    base = statistics.median(times["outside"])
    print(f"compile of TinyGPT({args.layers} layers) forward + graph break + forward, backend {args.backend}, "
          f"torch {torch.__version__}, Python {sys.version.split()[0]}, median of {args.rounds}")
    for setting in settings:
        median = statistics.median(times[setting])
        print(f"  {setting:<20} {median:8.2f} s   {median / base:5.2f}x")


if __name__ == "__main__":
    main()
