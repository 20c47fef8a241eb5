"""Reading a recording's files without following links or waiting on what is not a file.

Everything dynstep reads inside a recording (manifest.json, records.jsonl, run.json, compile.jsonl,
chunks) is opened with `read_regular`: `O_NOFOLLOW | O_NONBLOCK`, then checked to be a regular file,
so a symlink is never followed (it could point anywhere) and a FIFO or a device never blocks the
reader. `what_is` names what an entry is instead, for the error message.

    what_is(Path("run.dynstep/manifest.json"))   -> None (a regular file), "missing", "a FIFO", ...
    read_regular(Path("run.dynstep/records.jsonl"))
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISLNK, "a symbolic link (dynstep does not follow links inside a recording)"),
          (stat.S_ISFIFO, "a FIFO, not a regular file"), (stat.S_ISDIR, "a directory, not a file"),
          (stat.S_ISSOCK, "a socket, not a regular file"), (stat.S_ISCHR, "a device, not a regular file"),
          (stat.S_ISBLK, "a device, not a regular file"))


def what_is(path: Path) -> str | None:
    """None when `path` is a regular file itself (not a link to one); else what it is, in words."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def read_regular(file: Path) -> bytes:
    """The bytes of `file`, refusing anything but a regular file (no symlink, FIFO, device): OSError
    naming what it is."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(file, flags)
    except OSError as exc:
        kind = what_is(file)
        if kind is not None and kind != "missing" and not kind.startswith("unreadable"):
            raise OSError(f"{file.name} is {kind}") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{file.name} is {what_is(file) or 'not a regular file'}")
        chunks = []
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                return b"".join(chunks)
            chunks.append(block)
    finally:
        os.close(fd)
