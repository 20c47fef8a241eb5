"""No test leaves a process behind: what a test starts is found by a tag in its environment and killed.

A test's subprocess can outlive it: a torchrun job's workers run in sessions of their own, so killing
the launcher (or its process group) leaves them running; a test that fails or times out before its
`finally` (pytest-timeout ends the whole worker) cleans up nothing. tests/conftest.py sets
`PYTEST_REAP_TAG=<run>:<pytest pid>:<n>` in os.environ while a test runs, so every process started
from the test's environment carries it (torchrun passes it on to its workers); after the test,
the ones still running are killed (SIGKILL) and named in a warning. A worker that starts, and the
controller at the end of the run, kill what a dead pytest process of the same run left behind.

Linux (reads /proc); elsewhere it finds nothing.
"""

from __future__ import annotations

import itertools
import os
import signal
import uuid
from pathlib import Path

VAR = "PYTEST_REAP_TAG"
RUN_VAR = "PYTEST_REAP_RUN"
_count = itertools.count(1)


def new_run() -> None:
    """A pytest that is not an xdist worker starts a run (also one a test runs in a subprocess)."""
    os.environ[RUN_VAR] = uuid.uuid4().hex[:12]


def run_id() -> str:
    """This run's id: made by the controller (`new_run`) and inherited by its workers."""
    return os.environ.setdefault(RUN_VAR, uuid.uuid4().hex[:12])


def new_tag() -> str:
    return f"{run_id()}:{os.getpid()}:{next(_count)}"


def tagged() -> dict[int, str]:
    """pid -> tag of every other process carrying a tag (of any run)."""
    out: dict[int, str] = {}
    me = os.getpid()
    key = VAR.encode() + b"="
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:     # gone, or not ours to read
            continue
        for item in environ.split(b"\0"):
            if item.startswith(key):
                out[int(entry.name)] = item[len(key):].decode(errors="replace")
                break
    return out


def kill(pids: list[int]) -> list[str]:
    """SIGKILL each; what each was (its command line), for the message."""
    killed = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue
        killed.append(f"{pid} {cmd[:160]}")
    return killed


def reap(tag: str) -> list[str]:
    """Kill every process still carrying `tag`."""
    return kill([pid for pid, t in tagged().items() if t == tag])


def reap_orphans(everything: bool = False) -> list[str]:
    """Kill the processes of this run whose pytest process is gone (it crashed, or timed out); with
    `everything`, all of this run's (the run is over)."""
    run = run_id()
    out = []
    for pid, tag in tagged().items():
        owner_run, _, rest = tag.partition(":")
        owner = rest.partition(":")[0]
        if owner_run == run and (everything or not owner.isdigit() or not _alive(int(owner))):
            out.append(pid)
    return kill(out)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
