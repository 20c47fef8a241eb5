"""Which rank this process is, resolved at run time (never at compile time: every rank compiles the
same graphs).

    current()   -> Identity(rank, world, local_rank, launcher)
                   torch.distributed when a process group is initialized, else torchrun's RANK /
                   WORLD_SIZE, else a single process (0 of 1)
    multi_rank() -> world > 1
"""

from __future__ import annotations

import dataclasses
import os

_cached: "Identity | None" = None


@dataclasses.dataclass(frozen=True)
class Identity:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    launcher: str = "none"          # "torchrun", "process group" (mp.spawn, a launcher of one's own), "none"
    has_group: bool = False         # a default process group is initialized

    @property
    def multi(self) -> bool:
        return self.world > 1


def _group_identity() -> Identity | None:
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    rank, world = dist.get_rank(), dist.get_world_size()
    launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "process group"
    return Identity(rank, world, int(os.environ.get("LOCAL_RANK", rank)), launcher, True)


def _env_identity() -> Identity | None:
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError:
        return None
    launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "environment"
    return Identity(rank, world, int(os.environ.get("LOCAL_RANK", "0") or 0), launcher, False)


_from_env: "Identity | None" = None   # what the launcher's environment says, read once (it does not change)


def current() -> Identity:
    """This process's rank; cached once a process group exists (before that it may still change)."""
    global _cached, _from_env
    if _cached is not None:
        return _cached
    found = _group_identity()
    if found is not None:
        _cached = found
        return found
    if _from_env is None:
        _from_env = _env_identity() or Identity()
    return _from_env


def rank_world() -> tuple[int, int]:
    """(rank, world size): what every Snapshot carries."""
    ident = _cached or current()
    return ident.rank, ident.world


def reset() -> None:
    """Forget the cached identity (tests; a process group destroyed and made again)."""
    global _cached, _from_env
    _cached = _from_env = None
