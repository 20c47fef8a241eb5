"""The bytecode stepper's terminal REPL through a real pseudo-terminal:
`dynstep run --step-bytecode examples/bytecode_story.py`, typed commands, the screen read back
(once per mechanism: the subprocess inherits DYNSTEP_BYTECODE_MECHANISM from the fixture)."""

from __future__ import annotations

import os
import re

import pytest

pexpect = pytest.importorskip("pexpect")

from ..conftest import spawn_dynstep  # noqa: E402

pytestmark = pytest.mark.usefixtures("mechanism")    # each test once per mechanism (conftest.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = re.escape("(dynstep) ")


def spawn():
    return spawn_dynstep("run", "--step-bytecode", os.path.join(ROOT, "examples", "bytecode_story.py"))


def test_repl_steps_bytecode_into_the_graph_and_back():
    child = spawn()
    child.expect(r"entered Dynamo code · f \(transformed by Dynamo\) · #\d+ .*graph call")
    child.expect(PROMPT)
    child.sendline("l")
    child.expect(r"→\s+#\d+\s+\[\s*\d+\] LOAD_GLOBAL (NULL \+ )?__compiled_fn")    # 3.13: "__compiled_fn… + NULL"
    child.expect(PROMPT)
    child.sendline("b graph")
    child.expect("breakpoint at every graph call")
    child.expect(PROMPT)
    child.sendline("c")
    child.expect(r"breakpoint · f \(transformed by Dynamo\) · #\d+ \[\s*\d+\] CALL 1 · graph call")
    child.expect("s steps into its first node")
    child.expect(PROMPT)
    child.sendline("stack")
    child.expect(re.escape("= tensor([-1.0000, -0.3333,  0.3333,  1.0000])"))
    child.expect(PROMPT)
    child.sendline("s")
    child.expect(r"step · graph f\[0/0\] · node sin · torch\.sin")
    child.expect(PROMPT)
    child.sendline("p value.shape")
    child.expect(re.escape("value.shape = torch.Size([4])"))
    child.expect(PROMPT)
    for _ in range(3):
        child.sendline("s")
        child.expect(PROMPT)
    child.sendline("bt")
    child.expect(r"f \(transformed by Dynamo\)\s+bytecode_story\.py:\d+")
    child.expect(PROMPT)
    child.sendline("c")
    child.expect(r"breakpoint · resume of f after line \d+ .* graph call")
    child.expect(PROMPT)
    child.sendline("q")
    child.expect("program stopped from the debugger")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1


def test_repl_moves_between_frames_and_runs_statements():
    """Issue 30 item 3: up/down and statements at the bytecode prompt, on a real terminal."""
    child = spawn()
    child.expect(PROMPT)
    child.sendline("b entry")
    child.expect(PROMPT)
    child.sendline("c")
    child.expect(r"breakpoint · resume of f after line \d+ ")
    child.expect(PROMPT)
    child.sendline("u")
    child.expect(r"── frame 1 of 1 · f \(transformed by Dynamo\) · #\d+ \[\s*\d+\] CALL")
    child.expect(PROMPT)
    child.sendline("x.tolist()[0]")
    child.expect(re.escape("x.tolist()[0] = -1.0"))
    child.expect(PROMPT)
    child.sendline("d")
    child.expect("── frame 0 of 1 · resume of f after line")
    child.expect(PROMPT)
    child.sendline("y = y * 0")
    child.expect("ran in resume of f after line")
    child.expect(PROMPT)
    child.sendline("c")
    child.expect(re.escape("out tensor([2., 2., 2., 2.])"))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
