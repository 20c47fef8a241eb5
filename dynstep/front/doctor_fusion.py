"""`dynstep doctor --fusion`: does superstep's summary probing change Inductor's fusion here?

Compiles a TinyGPT training step (forward and backward, summary probes on every node and on the
gradient flowing into each) with Inductor, and each of its graphs once more without the probes, and
prints per graph the kernels with and without probes and how many probes the kernels compute
themselves (fused) or are handed a materialised value (extern). Not ok only when nothing was counted.

    lines, ok = fusion_report()
"""

from __future__ import annotations

import copy


def fusion_report(*, dim: int = 128, seq: int = 64, batch: int = 4) -> tuple[list[str], bool]:
    import torch

    from ..backends import kernel_counts, stats_pass
    from ..recording.compile_log import COMPILE_LOG
    from ..recording.facts import KernelCount
    from .demo.model import make

    model, _ = make(seed=0, dim=dim, seq=seq, layers=2)
    idx = torch.randint(0, model.tok.num_embeddings, (batch, seq))
    mark = COMPILE_LOG.mark()
    compiled = torch.compile(copy.deepcopy(model), backend="superstep", options={"probe": ["*"], "grads": True})
    with kernel_counts.measure():
        compiled(idx).float().pow(2).mean().backward()
    counts = [e for e in COMPILE_LOG.entries()[mark:] if isinstance(e, KernelCount)]
    lines = [f"fused summary statistics: {'on' if stats_pass.enabled() else 'off (DYNSTEP_FUSED_STATS=0)'}, for "
             f"values of {stats_pass.FUSE_MIN_NUMEL} elements or more",
             f"TinyGPT (2 layers, dim {dim}, batch {batch} x {seq}) training step, summary probes on every node, "
             "grads=True, Inductor:",
             f"  {'graph':<16} {'phase':<9} {'kernels':>7} {'without probes':>15} {'added':>6} {'fused':>6} "
             f"{'extern':>7}"]
    for c in counts:
        added = "?" if c.added is None else f"{c.added:+d}"
        lines.append(f"  {c.graph:<16} {c.phase:<9} {c.kernels:>7} {c.unprobed:>15} {added:>6} {c.fused:>6} "
                     f"{c.extern:>7}")
    for c in counts:
        if c.added is not None and c.added > 1:
            lines.append(f"  {c.graph} {c.phase}: the probes added {c.added} kernels ({c.extern} probe(s) on a value "
                         "materialised for them; the rest: statistics Inductor could not put in an existing loop)")
    if not counts:
        lines.append("  no kernel count was recorded: the probed graphs did not compile through Inductor's hooks")
    return lines, bool(counts)
