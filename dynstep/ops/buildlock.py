"""The lock one native build holds: never stale, never waited on without a bound and a message.

    with BuildLock(path, wait=300, on_wait=log_line) as lock:
        if lock.acquired: ...build...
        else: ...lock.holder says who held it...

The lock is an advisory `flock` on a file: the kernel drops it when the holding process ends, however
it ends (Ctrl-C, SIGKILL, OOM, a cancelled CI job), so a lock file left behind is only a file and the
next process takes it at once. The holder writes who it is (pid, host, start time) into the file for
the message others print while they wait. A waiter gives up after `wait` seconds. Standard library
only.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    since: float      # time.time() when it took the lock

    def describe(self) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.since)) if self.since else "an unknown time"
        return f"pid {self.pid} on {self.host or 'an unknown host'} (building since {when})"


def read_holder(path: Path) -> Holder | None:
    """Who wrote the lock file last, or None when it says nothing readable (a `touch`ed file)."""
    try:
        data = json.loads(path.read_text())
        return Holder(int(data["pid"]), str(data["host"]), float(data["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class BuildLock:
    """An exclusive flock on `path`, waited for at most `wait` seconds; `on_wait(holder, path)` is
    called once when the lock is held by another process. `fd` stays open while held (a child
    process given it with pass_fds holds the lock too)."""

    def __init__(self, path: Path, *, wait: float, on_wait: Callable[[Holder | None, Path], None],
                 poll: float = 0.25) -> None:
        self.path, self.wait, self.on_wait, self.poll = path, wait, on_wait, poll
        self.fd: int | None = None
        self.acquired = False
        self.holder: Holder | None = None
        self.waited = 0.0

    def __enter__(self) -> "BuildLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        start = time.monotonic()
        told = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                self.holder = read_holder(self.path)
                if not told:
                    self.on_wait(self.holder, self.path)
                    told = True
                self.waited = time.monotonic() - start
                if self.waited >= self.wait:
                    return self
                time.sleep(self.poll)
        self.acquired = True
        me = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, me.encode(), 0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            if self.acquired:
                os.ftruncate(self.fd, 0)
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
