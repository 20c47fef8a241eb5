"""Step through the code Dynamo wrote for a function with a side effect and a graph break.

    python examples/bytecode_story.py                        # the REPL (on a terminal)
    DYNSTEP_COMMANDS="s; stack; n; c" python examples/bytecode_story.py
    dynstep run --step-bytecode examples/bytecode_story.py

`f` updates a dict and appends to a list (side effects Dynamo replays after the graph), and
prints (a graph break: the rest of `f` runs as a resume function with a second graph).
"""

from __future__ import annotations

import sys

import torch

import dynstep


def f(x, d, log):
    y = torch.sin(x) * 2
    d["y"] = y.sum()
    log.append("before break")
    print("graph break here")
    z = torch.cos(y) + 1
    log.append(z.shape[0])
    return z


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "eager"
    cf = torch.compile(f, backend=backend)
    x = torch.linspace(-1, 1, 4)
    d, log = {}, []
    if dynstep_run_active():
        out = cf(x, d, log)
    else:
        with dynstep.step_bytecode():
            out = cf(x, d, log)
    print("out", out)
    print("d", d, "log", log)


def dynstep_run_active() -> bool:
    """Under `dynstep run --step-bytecode` the runner already opened step_bytecode()."""
    from dynstep.bytecode import active

    return active() is not None


if __name__ == "__main__":
    main()
