"""Story: record a small GPT's training, plant a NaN, and look at the run with `dynstep report`.

    python examples/report_story.py run.dynstep --nan-at 3
    dynstep report run.dynstep                  # run.report.html beside it, and a summary here

The model (dynstep's bundled TinyGPT) is compiled with superstep under aot_eager, every block,
attention and MLP probed with the gradient flowing into it. At step `--nan-at` one weight of
`blocks.1.mlp.fc` becomes NaN: the page names the first value that turned non-finite, with its
line. The loss reads `loss.item()` inside a compiled function (a graph break) and the last
evaluation uses a shorter sequence (a recompile): both appear in the page with their lines.
"""

from __future__ import annotations

import argparse

import torch

import dynstep
from dynstep.front.demo.model import make

PROBES = ["module:blocks.*", "module:blocks.*.attn", "module:blocks.*.mlp", "module:ln_f"]


@torch.compile(backend="aot_eager")
def loss_of(logits: torch.Tensor) -> torch.Tensor:
    loss = logits.float().logsumexp(-1).mean()
    if loss.item() > 1e4:                          # a graph break: .item() leaves the graph
        loss = loss / 1e4
    return loss


def train(recording: str, steps: int, nan_at: int | None) -> float:
    torch.manual_seed(0)
    model, idx = make(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    compiled = torch.compile(model, backend="superstep",
                             options={"inner": "aot_eager", "probe": PROBES, "grads": True})
    with dynstep.session(path=recording):
        for step in range(steps):
            if step == nan_at:
                with torch.no_grad():
                    model.blocks[1].mlp.fc.weight[0, 0] = float("nan")
            loss = loss_of(compiled(idx))
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            compiled(idx[:, :8])                    # a shorter sequence: a recompile
    return float(loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--nan-at", type=int, default=None, help="plant a NaN weight before this step")
    args = parser.parse_args()
    loss = train(args.recording, args.steps, args.nan_at)
    print(f"recorded {args.steps} steps into {args.recording} (last loss {loss:.4f}); "
          f"now: dynstep report {args.recording}")


if __name__ == "__main__":
    main()
