"""Distributed runs: one debugger across the ranks of a `torch.distributed` job (torchrun, process
groups, their TCPStore), never a home-made transport.

    identity.current()                 -> Identity(rank=1, world=2, local_rank=1, launcher="torchrun")
    ranks.chosen(("all" | (0, 2)), world)  -> frozenset of ranks that may pause (checked against the world)
    coordinator.Coordinator            the lockstep over the process group's store (docs/distributed.md)

This room depends on `core` and `_compat` only: the probe runtime stamps snapshots with the rank,
sessions write per-rank recordings (where each rank's goes: `dynstep.recording.paths`), and the
stepper gets the coordinator plugged into its `coordinator` slot by the superstep backend (the
stepper never imports it).
"""
