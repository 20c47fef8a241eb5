"""Find the bug: the compiled model's numbers differ from eager. Which line of mine is it?

The story: a small classifier is fine eagerly; under torch.compile (Inductor) its outputs are
off. We plant the compiler bug with torch's own test switch
(`torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY`, Inductor's relu becomes relu + 1)
and let `dynstep.diff` find it: outputs first, then a search over the graph, then the node
confirmed on the compiled inputs, the backends ladder, a repro and an HTML page.

    python examples/find_the_bug.py [--html diff.html] [--repro find_the_bug_repro]
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import dynstep
from dynstep.front.diff_show import progress_bar


class Classifier(nn.Module):
    def __init__(self, dim: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Linear(dim, dim)
        self.hidden = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(torch.tanh(self.embed(x)), x.shape[-1:])
        x = torch.relu(self.hidden(x))          # <- the compiler gets this one wrong
        return self.out(x).log_softmax(-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--html", default="diff.html")
    ap.add_argument("--repro", default="find_the_bug_repro")
    args = ap.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache")
    import torch._inductor.config as inductor_config

    inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "accuracy"  # the planted compiler bug
    torch.manual_seed(0)
    model, x = Classifier().eval(), torch.randn(32, 64)

    with torch.no_grad():
        eager, compiled = model(x), torch.compile(model)(x)
    print(f"1. the symptom: max |compiled - eager| = {(compiled - eager).abs().max():.3g}")

    print("2. dynstep.diff(model, x, backend='inductor')")
    with progress_bar() as progress:
        report = dynstep.diff(model, x, backend="inductor", progress=progress, repro=args.repro)
    report.show()
    first = report.first_divergence
    if first is not None:
        print(f"3. the culprit: {first.source} `{first.source_text}` in module {first.module or '(top level)'}")
    if report.root_cause is not None:
        print(f"4. below the node: {report.root_cause.sentence}")
    report.to_html(args.html)
    repro = next((g.repro for g in report.graphs if g.repro), "")
    print(f"5. a page to share: {args.html}" + (f"; a repro to file upstream: python {repro}" if repro else ""))


if __name__ == "__main__":
    main()
