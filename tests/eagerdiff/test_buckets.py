"""The diff on integer position buckets and values overwritten in place (issue 25 defect 5: T5).

T5's relative-position buckets are computed with `relative_buckets += ...` (the first value is
overwritten in place later in the graph) from a float log truncated to an integer. The diff named that
integer add as the first divergence of a bug planted elsewhere. The full T5 and BART checks are in
tests/models/test_families.py.
"""

from __future__ import annotations

import math
import os
import sys

import torch
import torch.nn as nn

import dynstep

sys.path.insert(0, os.path.dirname(__file__))
import planted  # noqa: E402


class Buckets(nn.Module):
    """T5's `_relative_position_bucket` shape, then an embedding of the buckets and a norm."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bias = nn.Embedding(16, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x, positions):
        rel = positions[None, :] - positions[:, None]
        buckets = (rel > 0).to(torch.long) * 8
        rel = torch.abs(rel)
        large = 4 + (torch.log(rel.float() / 4) / math.log(32 / 4) * 4).to(torch.long)
        large = torch.min(large, torch.full_like(large, 7))
        buckets += torch.where(rel < 4, rel, large)          # overwrites the first value in place
        return self.norm(x + self.bias(buckets).sum(1))


def test_the_diff_names_a_planted_bug_not_the_integer_buckets_before_it():
    model = Buckets().eval()
    x, positions = torch.randn(12, 8), torch.arange(12)
    bad = planted.scale("torch.nn.functional.layer_norm", "norm", 1.01)
    with torch.no_grad():
        report = dynstep.diff(model, x, positions, backend=bad, ladder=False)
        clean = dynstep.diff(model, x, positions, backend="eager", ladder=False)
    assert not report.ok and report.first_divergence.module == "norm"
    assert report.first_divergence.target == "torch.nn.functional.layer_norm"
    assert clean.ok
    judged = {d.node: d for g in report.graphs for d in g.nodes}
    assert not any(d.diverged for name, d in judged.items() if name.startswith("buckets"))
