"""Which ranks may pause: the `ranks` option (`--ranks`, DYNSTEP_RANKS) checked against the job.

    chosen("all", 4)      -> frozenset({0, 1, 2, 3})
    chosen((1, 3), 2)     -> OptionsError: rank 3 does not exist in this job of 2 ranks (0-1)
    chosen(None, 2)       -> frozenset({0})   (the default: the rank whose output launchers show)

The syntax ("0", "1,3", "all") is read by `dynstep.core.options`; this module knows the world size.
"""

from __future__ import annotations

from ..core.errors import OptionsError
from .identity import Identity

DEFAULT = (0,)


def chosen(ranks: str | tuple[int, ...] | None, world: int) -> frozenset[int]:
    if ranks == "all":
        return frozenset(range(world))
    wanted = DEFAULT if ranks is None else ranks
    missing = sorted(r for r in wanted if r >= world)
    if missing:
        raise OptionsError(f"ranks={','.join(map(str, wanted))}: rank {', '.join(map(str, missing))} does not exist "
                           f"in this job of {world} rank(s) (0-{world - 1}); expected ranks below {world}, "
                           "or 'all'")
    return frozenset(wanted)


def check_job(ranks: str | tuple[int, ...] | None, ident: Identity) -> frozenset[int]:
    """The ranks that pause in this job, or an OptionsError when the job cannot pause by rank."""
    if not ident.multi:
        if ranks is not None and ranks != "all" and any(r > 0 for r in ranks):
            raise OptionsError(f"ranks={','.join(map(str, ranks))}: this process is not part of a distributed "
                               "job (no process group, no RANK/WORLD_SIZE from a launcher); start it with "
                               "torchrun, or call torch.distributed.init_process_group before the first call")
        return frozenset({0})
    if not ident.has_group and ident.launcher != "torchrun":
        raise OptionsError(f"rank {ident.rank} of {ident.world}: no process group is initialized and no torchrun "
                           "store is there to wait on; call torch.distributed.init_process_group before the "
                           "first compiled call")
    return chosen(ranks, ident.world)
