"""`once`: a function that runs its body the first time it is called, in whichever thread, and is a
cheap no-op afterwards (the `ensure()` of each op owner: kernels registered, parts connected).

    @once
    def ensure() -> None:
        register_things()
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable


def once(fn: Callable[[], None]) -> Callable[[], None]:
    lock = threading.Lock()
    done = False

    @functools.wraps(fn)
    def run() -> None:
        nonlocal done
        if done:
            return
        with lock:
            if not done:
                fn()
                done = True

    return run
