"""torch.distributed internals the distributed coordinator needs (`dynstep.jobs`).

    store = default_store()              # the default process group's store (PrefixStore over TCPStore)
    saved = pg_timeout(); set_pg_timeout(timedelta(days=1)); ...; set_pg_timeout(saved)
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any


def default_store() -> Any:
    """The default process group's store.

    Upstream: torch/distributed/distributed_c10d.py `_get_default_store` (the store
    init_process_group made, scoped to the default group)."""
    from torch.distributed import distributed_c10d as c10d

    return c10d._get_default_store()


def pg_timeout() -> timedelta | None:
    """The default process group's collective timeout (None when it cannot be read).

    Upstream: torch/distributed/distributed_c10d.py `_get_default_group` and the backend's
    `options._timeout` (ProcessGroupGloo.Options / ProcessGroupNCCL.Options, torch/csrc/distributed/c10d/init.cpp)."""
    import torch
    from torch.distributed import distributed_c10d as c10d

    try:
        group = c10d._get_default_group()
        device = torch.device("cuda") if torch.cuda.is_available() and c10d.get_backend() == "nccl" \
            else torch.device("cpu")
        return group._get_backend(device).options._timeout
    except (AttributeError, RuntimeError, ValueError):
        return None


def set_pg_timeout(timeout: timedelta) -> bool:
    """Set the default group's timeout for collectives started from now on; False when torch lacks it.

    Upstream: torch/distributed/distributed_c10d.py `_set_pg_timeout` (gloo and NCCL; a collective
    already in flight keeps the timeout it started with)."""
    from torch.distributed import distributed_c10d as c10d

    setter = getattr(c10d, "_set_pg_timeout", None)
    if setter is None:
        return False
    setter(timeout)
    return True
