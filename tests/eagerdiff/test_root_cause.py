"""Below the first divergent node: `DiffReport.root_cause` names the compiler subsystem that changed
it, found by ablations on that node's subgraph with its recorded inputs (CompilerBisector's
subsystems, fusion, float64). Bugs are planted inside Inductor (planted_inductor.py)."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynstep
from dynstep.eagerdiff.judge import Metrics, Tolerance, verdict

sys.path.insert(0, os.path.dirname(__file__))
import planted_inductor as planted  # noqa: E402


class Act(nn.Module):
    def forward(self, x):
        return torch.tanh(x)  # TANH_LINE


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.act, self.fc2 = nn.Linear(32, 64), nn.LayerNorm(64), Act(), nn.Linear(64, 8)

    def forward(self, x):
        h = self.norm(self.fc1(x))  # NORM_LINE
        h = self.act(h)
        return self.fc2(F.silu(h))  # SILU_LINE


def _line(marker: str) -> str:
    with open(__file__) as f:
        number = next(i for i, text in enumerate(f, 1) if marker in text and "_line(" not in text)
    return f"{os.path.basename(__file__)}:{number}"


def _diff():
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(16, 32)
    return dynstep.diff(model, x, backend="inductor", ladder=False)


def _check(report, subsystem: str, detail: str, node_line: str, module: str) -> None:
    first, cause = report.first_divergence, report.root_cause
    assert first is not None and first.source == _line(node_line) and first.module == module, report.summary()
    assert first.verdict == "compiled worse"
    assert cause is not None, [g.notes for g in report.graphs]
    assert (cause.subsystem, cause.detail) == (subsystem, detail), cause
    assert (cause.node, cause.module, cause.source) == (first.node, first.module, first.source)
    assert cause.kernel and cause.kernel == first.kernel
    assert cause.subgraph_nodes == 1 and any(a.fixed for a in cause.ablations)
    data = json.loads(report.to_json())
    assert data["root_cause"]["subsystem"] == subsystem and data["root_cause"]["detail"] == detail
    assert data["first_divergence"]["verdict"] == "compiled worse"
    assert subsystem in report.summary() and detail in report.to_html()


def test_a_wrong_lowering_is_named_at_its_lowering_and_node():
    with planted.wrong_lowering(torch.ops.aten.tanh.default, 0.01):
        report = _diff()
    _check(report, "lowerings", "aten.tanh", "TANH_LINE", "act")
    cause = report.root_cause
    assert cause.stage == "inductor" and cause.number is not None
    assert "lowering of aten.tanh" in cause.sentence and "act" in cause.sentence


def test_a_wrong_post_grad_pass_is_named_at_the_pass_and_node():
    with planted.wrong_post_grad_pass():
        report = _diff()
    _check(report, "post_grad_passes", "post_grad_custom_post_pass", "NORM_LINE", "norm")
    assert [a.name for a in report.root_cause.ablations if a.fixed][-2:][0].startswith("inductor: post_grad_passes")


def test_a_wrong_decomposition_is_named_at_the_decomposition_and_node():
    with planted.wrong_decomposition():
        report = _diff()
    _check(report, "decompositions", "aten.silu", "SILU_LINE", "")
    assert report.root_cause.stage == "aot_eager_decomp_partition"


def test_a_clean_run_reports_no_ablation():
    report = _diff()
    assert report.ok and report.root_cause is None
    assert not any("root cause" in note for g in report.graphs for note in g.notes)
    assert json.loads(report.to_json())["root_cause"] is None


def test_root_cause_can_be_turned_off():
    torch.manual_seed(0)
    with planted.wrong_lowering(torch.ops.aten.tanh.default, 0.01):
        report = dynstep.diff(Net().eval(), torch.randn(16, 32), backend="inductor", ladder=False, root_cause=False)
    assert report.first_divergence is not None and report.root_cause is None


def _metrics(error: float, ref_error: float, scale: float, tol=Tolerance()) -> Metrics:
    budget = tol.budget(ref_error, torch.float32)
    return Metrics(error > budget, error, ref_error, budget, 0.0, 0.0, 1.0, 0, scale)


@pytest.mark.parametrize("error, ref_error, scale, expected", [
    (1e-2, 1e-8, 1.0, "compiled worse"),        # far beyond eager's error: a compiler bug
    (1e-9, 1e-3, 1.0, "eager worse"),           # eager is the one off (e.g. compiled keeps more precision)
    (5e-4, 1e-4, 1e3, "rounding"),              # beyond the budget, but both within 8 float32 epsilons
    (1.5e-7, 1e-7, 1.0, "rounding"),            # neither beyond the other's budget
    (30.0, 1.0, 1e3, "compiled worse"),         # large values: errors far beyond their own rounding
])
def test_verdict_against_float64(error, ref_error, scale, expected):
    assert verdict(_metrics(error, ref_error, scale), torch.float32, Tolerance()) == expected


def test_a_new_nan_is_always_compiled_worse():
    m = Metrics(True, math.inf, 0.0, 1e-5, math.inf, math.inf, math.nan, 3, 1.0)
    assert verdict(m, torch.float32, Tolerance()) == "compiled worse"


def test_a_more_precise_compiled_program_is_eager_worse():
    """A backend that computes in float64: `(a + b) - a` loses b's digits eagerly, not compiled."""
    def precise(gm, example_inputs):
        def run(*args):
            return tuple(v.float() for v in gm(*[a.double() if a.is_floating_point() else a for a in args]))
        return run

    def fn(a, b):
        return (a + b) - a

    torch.manual_seed(0)
    report = dynstep.diff(fn, torch.randn(256) * 1e4, torch.randn(256), backend=precise)
    assert report.ok and [d.verdict for d in report.graphs[0].outputs] == ["eager worse"]
