"""The README's test command survives a test that kills its worker (tests/xdist_recovery.py): a segfault and
a test past its time limit each fail once, by name, and every other test still runs, once; the run ends.
pytest-xdist 3.8.0's own `--dist loadfile` left such a run waiting for ever (a CI run sat at 98% until its
time limit)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys

import pytest

sys.path.insert(0, {str(ROOT)!r})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from tests.xdist_recovery import RecoveringLoadFile

    return RecoveringLoadFile(config, log)
"""

FILES = {
    "test_a.py": "def test_a1(): pass\ndef test_a2(): pass\n",
    "test_b.py": "import os, signal\ndef test_b1(): pass\n"
                 "def test_b_segfault(): os.kill(os.getpid(), signal.SIGSEGV)\ndef test_b3(): pass\n",
    "test_c.py": "import time\ndef test_c1(): pass\ndef test_c_hangs(): time.sleep(600)\ndef test_c3(): pass\n",
    "test_d.py": "def test_d1(): pass\ndef test_d2(): pass\n",
}


def test_a_crashed_and_a_timed_out_worker_fail_their_test_and_the_run_goes_on(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 5\ntimeout_method = thread\n")
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile",
                          "-rfE", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    out = run.stdout + run.stderr
    summary = run.stdout.strip().splitlines()[-1]
    assert re.search(r"\b2 failed, 8 passed\b", summary), out[-3000:]
    assert "worker 'gw" in out and "crashed while running 'test_b.py::test_b_segfault'" in out
    assert "crashed while running 'test_c.py::test_c_hangs'" in out
    assert out.count("FAILED") == 2, out[-3000:]
