"""The DAP session again, driven by Microsoft's DebugClient (npm @vscode/debugadapter-testsupport) from a
small Node test (tests/dap_node/). Skips only when node or npm is missing; the test client is installed
here with `npm ci` (from tests/dap_node/package-lock.json) the first time it is missing. job.test.js drives the job adapter of a two-rank torchrun job."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from .dap import ROOT, env

NODE_DIR = ROOT / "tests" / "dap_node"


def install_node_client(npm: str) -> None:
    """`npm ci` once, when the client is not installed yet (the README's test command has no npm step)."""
    if (NODE_DIR / "node_modules" / "@vscode" / "debugadapter-testsupport").is_dir():
        return
    try:
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=str(NODE_DIR), capture_output=True,
                              text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("npm ci in tests/dap_node did not finish in 300 s (is the npm registry reachable?)")
    assert proc.returncode == 0, f"npm ci in tests/dap_node failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"


def test_microsofts_debug_client_runs_the_whole_session_and_a_torchrun_job():
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    install_node_client(shutil.which("npm") or "npm")
    # one file at a time: run side by side, the two-rank job starves the single-process session on 2 cores
    # (its client's disconnect once came after the program had finished waiting for it, and went unanswered)
    proc = subprocess.run([node, "--test", "--test-concurrency=1", "--test-timeout=300000", "test/"], cwd=str(NODE_DIR),
                          env={**env(), "PYTHON": sys.executable}, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "# pass 2" in proc.stdout and "# fail 0" in proc.stdout      # sequence.test.js, job.test.js
