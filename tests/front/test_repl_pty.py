"""The terminal REPL through a real pseudo-terminal: `dynstep run` on the example script."""

from __future__ import annotations

import os
import re

import pytest

pexpect = pytest.importorskip("pexpect")


from ..conftest import spawn_dynstep  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = re.escape("(dynstep) ")


def spawn(*extra: str):
    return spawn_dynstep("run", "--inner", "eager", "--pause", "module:blocks.0.attn", *extra,
                         os.path.join(ROOT, "examples", "pause_and_step.py"), "1")


def test_repl_prompt_print_set_step_graph_continue():
    child = spawn()
    child.expect(r"paused .* node out .* blocks\.0\.attn")
    child.expect(PROMPT)
    child.sendline("p value.shape")
    child.expect(re.escape("value.shape = torch.Size([2, 16, 32])"))
    child.expect(PROMPT)
    child.sendline("set value = value * 0")
    child.expect("later nodes see the new value")
    child.expect(PROMPT)
    child.sendline("s")
    child.expect(r"step .* node x_1")
    child.expect(PROMPT)
    child.sendline("g")
    child.expect(r"→\s+x_1\s+add")
    child.expect(PROMPT)
    child.sendline("c")
    child.expect("changed by the debugger")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_at_the_prompt_aborts_cleanly():
    child = spawn()
    child.expect(PROMPT)
    child.sendintr()
    child.expect("program stopped from the debugger")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1


LOOP_SCRIPT = """
import sys, time, torch
f = torch.compile(lambda x: torch.relu(x) * 2 + 1)
f(torch.ones(3))
print("looping", flush=True)
end = time.time() + 120
while time.time() < end:
    f(torch.ones(3))
"""


def test_ctrl_c_while_running_stops_at_the_next_node(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(LOOP_SCRIPT)
    child = spawn_dynstep("run", "--inner", "eager", "--pause", "op:relu", str(script), home=str(tmp_path))
    child.expect(r"paused .* node relu")
    child.expect(PROMPT)
    child.sendline("cl")           # nothing can stop now: the loop runs the plain variant
    child.expect(PROMPT)
    child.sendline("c")
    child.expect("looping")
    child.sendintr()
    child.expect("interrupted; stopping at the next node")
    child.expect(r"step .* node relu")
    child.expect(PROMPT)
    child.sendline("q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
