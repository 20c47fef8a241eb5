"""User story: "what does Dynamo think `h` is at this line, and what is it really, every call?"

One `dynstep.breakpoint()` gives both: a compile-time stop (symbolic locals, the graph traced so
far, guards, inlined frames, the recompile reason) and a runtime stop with the real tensors,
without a graph break, under plain torch.compile (Inductor) with fullgraph=True.

Interactive:   python examples/breakpoint_story.py
Scripted (CI): DYNSTEP_COMMANDS="locals; graph; c; p h.abs().max(); set h = h.clamp(max=1.0); c" \\
               python examples/breakpoint_story.py
Production:    DYNSTEP_BREAKPOINTS=0 python examples/breakpoint_story.py   (no node in the graph)
"""

import torch

import dynstep


@torch.compile(fullgraph=True)
def block(x, w):
    h = x @ w
    dynstep.breakpoint()                                        # stops at compile time and at run time
    dynstep.breakpoint(compile=False, when=lambda h: h.abs().max() > 10)   # only when a value explodes
    return torch.relu(h)


if __name__ == "__main__":
    torch.manual_seed(0)
    w = torch.randn(8, 4)
    print(block(torch.randn(2, 8), w).sum().item())
    print(block(torch.randn(2, 8) * 100, w).sum().item())      # the second breakpoint fires here
