"""User story: "my loss goes strange after a few steps — what do the blocks output, and their gradients?"

Run:  python examples/probe_training.py
No code change alternative: DYNSTEP_PROBE="module:blocks.*.mlp" DYNSTEP_GRADS=1 python your_train.py
with torch.compile(model, backend="superstep").
"""

import torch

import dynstep
from dynstep.front.demo.model import make


def main() -> None:
    model, idx = make(layers=2)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    cm = torch.compile(model, backend="superstep",
                       options={"inner": "inductor", "probe": ["module:blocks.*.mlp", "op:layer_norm"],
                                "actions": ["summary", "record"], "record": 4, "grads": True})
    with dynstep.session() as s:
        for step in range(5):
            loss = torch.nn.functional.cross_entropy(cm(idx).flatten(0, 1), idx.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step}: loss {loss.item():.4f}")
    for snap in s.records("module:blocks.*.mlp"):
        print(f"{snap.kind:5} {snap.module:14} call {snap.call}  {snap.source:12} absmax {snap.stats['absmax']:.4f}"
              f"  nan {snap.stats['nan']}")
    path = s.save("probe_training.dynstep")
    print(f"saved {len(s)} snapshots to {path}; reload with dynstep.load({str(path)!r})")


if __name__ == "__main__":
    main()
