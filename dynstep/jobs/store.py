"""The store the ranks meet on: the default process group's store, or torchrun's agent store.

Keys live under ``dynstep/<run id>/<restart>/`` so a job torchrun restarts never reads the keys of
the attempt before it. Waiting is polling (`check` with a short backoff), never a timed
`store.wait`: a long blocking wait keeps Python's signal handlers from running (SIGTERM from the
launcher) and every timed-out wait logs C++ warnings.

    store = open_store(identity)
    poll = Backoff(); while not store.check([key]): poll.sleep()
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from .. import _compat
from ..core.errors import OptionsError
from .identity import Identity


def open_store(ident: Identity) -> Any:
    import torch.distributed as dist

    if ident.has_group:
        base = _compat.default_store()
    elif ident.launcher == "torchrun" and "MASTER_ADDR" in os.environ:
        # torchrun's agent hosts a TCPStore on MASTER_ADDR:MASTER_PORT that outlives its workers
        base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                             timeout=timedelta(seconds=60))
    else:
        raise OptionsError(f"rank {ident.rank} of {ident.world}: no process group to coordinate the ranks on; "
                           "call torch.distributed.init_process_group before the first compiled call")
    scope = f"dynstep/{os.environ.get('TORCHELASTIC_RUN_ID', 'job')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
    return dist.PrefixStore(scope, base)


_ABSENT = "\x00dynstep: no such key\x00"   # never a value dynstep stores


def read(store: Any, key: str) -> str | None:
    """The value of `key`, or None when it is not set, in one request that never blocks.

    Not `check` then `get`: a key another rank deletes between the two (``paused/<rank>`` as that rank
    leaves its pause) makes `get` wait until the key is set again or the store times out, and the rank
    that deleted it may be waiting for this one (a `step --all` job hung so on a loaded machine,
    2026-11-26). `compare_set(key, absent, absent)` answers the value when the key is set and `absent`
    when it is not, without writing (torch/csrc/distributed/c10d/TCPStore*.cpp, HashStore.cpp and
    FileStore.cpp all answer a missing key with the expected value)."""
    value = store.compare_set(key, _ABSENT, _ABSENT).decode()
    return None if value == _ABSENT else value


def counter(store: Any, key: str) -> int:
    """A counter's value without changing it (add 0 never blocks)."""
    return int(store.add(key, 0))


class Backoff:
    """Sleeps from 0.2 ms up to `cap` seconds, doubling: fast when the others are close behind."""

    def __init__(self, cap: float = 0.02) -> None:
        self.cap, self.delay = cap, 0.0

    def sleep(self) -> None:
        time.sleep(self.delay)
        self.delay = min(self.cap, self.delay * 2 if self.delay else 0.0002)
