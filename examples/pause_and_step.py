"""Pause inside a compiled transformer, look at real values, change one, step on.

Run it under the debugger, stopping at what the first attention block returns:

    dynstep run --pause "module:blocks.0.attn" examples/pause_and_step.py
    (dynstep) p value.abs().max()           # the real tensor, inside the Inductor graph
    (dynstep) set value = value.clamp(-0.1, 0.1)   # every later node sees the new value
    (dynstep) s                              # the next node, whatever it is
    (dynstep) graph                          # the graph listing, current node marked
    (dynstep) c

Without a terminal, give the commands up front (CI):

    dynstep run --pause "module:blocks.0.attn" \\
        --commands "p value.abs().max(); set value = value.clamp(-0.1, 0.1); c" examples/pause_and_step.py

Run plainly (python examples/pause_and_step.py) it is an ordinary torch.compile program.
"""

import sys

import torch

from dynstep.front.demo.model import make


def main() -> int:
    model, idx = make(layers=int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    model.eval()
    compiled = torch.compile(model)          # dynstep run routes this through superstep
    with torch.no_grad():
        logits = compiled(idx)
        reference = model(idx)
    changed = (logits - reference).abs().max().item()
    print(f"logits {tuple(logits.shape)}  max |compiled - eager| = {changed:.3g}")
    print("changed by the debugger" if changed > 1e-3 else "same as eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
