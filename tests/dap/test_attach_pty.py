"""`dynstep attach` in a real pseudo-terminal, driving a program started with `dynstep run --dap`."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from ..conftest import spawn_dynstep
from .dap import ROOT, start_program

pexpect = pytest.importorskip("pexpect")
PROMPT = re.escape("(dynstep) ")


def test_attach_drives_a_remote_program_from_a_terminal(tmp_path):
    proc, port = start_program("--wait", "--inner", "eager", "--pause", "module:blocks.0.attn",
                               os.path.join(ROOT, "examples", "pause_and_step.py"), "1")
    child = spawn_dynstep("attach", f"localhost:{port}", cwd=str(tmp_path), home=str(tmp_path))
    try:
        child.expect(r"breakpoint · pause selector module:blocks\.0\.attn at out")
        child.expect(r"model\.py:\d+ +blocks\.0\.attn\.c_proj: out = self\.c_proj\(attn\)")
        child.expect(r"f32\[2, 16, 32\] cpu")
        child.expect(PROMPT)
        child.sendline("p value.shape")
        child.expect(re.escape("value.shape = torch.Size([2, 16, 32])"))
        child.expect(PROMPT)
        child.sendline("set value = value * 0")
        child.expect("later nodes see the new value")
        child.expect(PROMPT)
        child.sendline("set value = torch.ones(3)")
        child.expect(r"shape \[3\]")
        child.expect(PROMPT)
        child.sendline("s")
        child.expect(r"step · step to x_1")
        child.expect(PROMPT)
        child.sendline("g")
        child.expect(r"→ x_1 = _operator\.add")
        child.expect(PROMPT)
        child.sendline("c")
        child.expect("the program exited with code 0")
        child.expect(pexpect.EOF)
    finally:
        child.close()
        proc.wait(60)
        out = proc.stdout.read()
    assert child.exitstatus == 0, proc.err()
    assert proc.returncode == 0 and "changed by the debugger" in out


def test_attach_to_a_running_program_pause_with_ctrl_c_and_quit(tmp_path):
    # the program keeps running for 10 minutes (q ends it): on a slow machine starting the client alone
    # can take most of a minute, and a shorter loop may end before the pause reaches it
    proc, port = start_program("--inner", "eager", os.path.join(ROOT, "tests", "dap", "block_model.py"), "0", "600")
    child = spawn_dynstep("attach", f"127.0.0.1:{port}", cwd=str(tmp_path), home=str(tmp_path))
    try:
        child.expect("attached; the program runs")
        child.sendintr()
        child.expect(r"paused · paused at \w+")
        child.expect(PROMPT)
        child.sendline("q")
        child.expect("the program exited with code 1")
        child.expect(pexpect.EOF)
    finally:
        child.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:   # a failed run: leave no program behind
            proc.kill()
            proc.wait()
        err = proc.err()
    assert proc.returncode == 1 and "terminated by the debug client" in err
