"""Issue 30 item 6: the bytecode stepper attributed Dynamo's side-effect replay (``d.update({'y': ...})``,
``log[:] = [...]``) to the function's ``def`` line instead of the line that wrote the object."""

from __future__ import annotations

import inspect

import pytest
import torch

import dynstep
from dynstep.bytecode.events import BytecodeStopped

pytestmark = pytest.mark.usefixtures("mechanism")    # each test once per mechanism (conftest.py)


def writes(x, d, log):
    y = torch.sin(x) * 2
    d["y"] = y.sum()                 # +2
    log.append("before break")       # +3
    d["n"] = 3                       # +4
    print("graph break")             # +5
    z = torch.cos(y) + 1
    log.append(z.shape[0])           # +7
    d.update(k=1)                    # +8
    return z


FIRST = inspect.getsourcelines(writes)[1]


def test_side_effect_replay_is_attributed_to_the_line_that_wrote_it(events):
    cf = torch.compile(writes, backend="eager")
    d, log = {}, []
    with dynstep.step_bytecode(commands="; ".join(["s"] * 400)):
        cf(torch.ones(4), d, log)
    assert set(d) == {"y", "n", "k"} and log == ["before break", 4]
    replays = {(e.kind, e.row.text, e.line, e.source_text) for e in events
               if isinstance(e, BytecodeStopped) and e.row.side_effect}
    assert any(kind == "transformed" and "update" in row and line == FIRST + 2 and text.startswith('d["y"]')
               for kind, row, line, text in replays)
    assert any(kind == "transformed" and line == FIRST + 3 and text.startswith("log.append")
               for kind, _, line, text in replays)
    assert any(kind == "resume" and line == FIRST + 7 for kind, _, line, _ in replays)
    assert any(kind == "resume" and line == FIRST + 8 for kind, _, line, _ in replays)
    assert not any(line == FIRST for _, _, line, _ in replays)      # never the def line again

