"""The terminal REPL on one rank of a distributed job.

torchrun starts its workers in a new session (no controlling terminal: /dev/tty fails) but they
inherit the launcher's terminal as fd 0; with ``--redirects``, ``--tee`` or
``--local-ranks-filter`` their stdout and stderr go to files or pipes, so a paused rank would ask
where nobody reads. This front end writes the stop, every answer and its ``[rank N] (dynstep)``
prompt to the launcher's terminal itself (``os.ttyname(0)``) and reads the commands from fd 0.

    frontend = rank_repl(rank=1)      # None when stdin is no terminal (then nothing can answer)
"""

from __future__ import annotations

import os
import sys
from typing import IO

from rich.console import Console

from . import console as console_mod
from . import repl


class RankReplFrontend(repl.ReplFrontend):
    def __init__(self, rank: int, terminal: IO[str] | None) -> None:
        super().__init__()
        self.rank, self.terminal = rank, terminal

    def _input(self, prompt: str) -> str:
        labelled = f"[rank {self.rank}] {prompt}"
        if self.terminal is None:
            return input(labelled)
        self.terminal.write(labelled)
        self.terminal.flush()
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")


def rank_repl(rank: int) -> RankReplFrontend | None:
    """The REPL for this rank, on the launcher's terminal when its own output is hidden."""
    if sys.stdin is None or not sys.stdin.isatty():
        return None
    terminal = None
    if not (sys.stderr is not None and sys.stderr.isatty()):
        try:
            fd = os.open(os.ttyname(0), os.O_WRONLY | os.O_NOCTTY)
        except OSError:
            return None
        terminal = os.fdopen(fd, "w", buffering=1)
        shown = Console(file=terminal, highlight=False, soft_wrap=True)
        repl.use_console(shown)
        console_mod.use_console(shown)
    return RankReplFrontend(rank, terminal)
