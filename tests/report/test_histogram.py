"""Histograms of recorded tensors in the report: the model (read lazily from a `tensors=False` load),
the page's bars, the JSON and TensorBoard's histogram events; then a real `record` run."""

from __future__ import annotations


import pytest
import torch

import dynstep
from dynstep.core.records import Snapshot, Stats
from dynstep.front import report_html
from dynstep.recording.reader import load
from dynstep.recording.storage import save
from dynstep.report import export
from dynstep.report.histogram import histogram
from dynstep.report.model import build


def snap(seq: int, call: int, tensor: torch.Tensor | None, *, kind: str = "value", nan: int = 0) -> Snapshot:
    return Snapshot(kind=kind, probe="module:fc", node="linear", target="torch.nn.functional.linear", module="fc",
                    source="model.py:12", graph="forward[0/0]", call=call, shape=(4, 8), dtype="float32",
                    device="cpu", stats=Stats(nan=nan, count=32), site=1 if kind == "value" else 2, seq=seq,
                    tensor=tensor)


def test_the_panel_shows_the_first_hit_with_a_nan_else_the_last(tmp_path):
    torch.manual_seed(0)
    good, later = torch.randn(4, 8), torch.randn(4, 8) * 3
    bad = torch.randn(4, 8)
    bad[0, :3], bad[1, 0], bad[1, 1] = float("nan"), float("inf"), -float("inf")
    path = save([snap(1, 0, good), snap(2, 0, good, kind="grad"), snap(3, 1, bad, nan=3), snap(4, 1, later, kind="grad"),
                 snap(5, 2, later)], tmp_path / "r.dynstep")
    rec = load(path, tensors=False)
    assert all(s.tensor is None for s in rec.all())
    (panel,) = build(rec).panels
    v, g = panel.value_histogram, panel.grad_histogram
    assert (v.call, v.nan, v.posinf, v.neginf, v.numel, v.finite) == (1, 3, 1, 1, 32, 27)
    finite = bad[bad.isfinite()].double()
    counts, edges = torch.histogram(finite, bins=30, range=(float(finite.min()), float(finite.max())))
    assert v.counts == tuple(int(c) for c in counts) and v.edges == pytest.approx(edges.tolist())
    assert (g.call, sum(g.counts)) == (1, 32)                           # no NaN in the gradients: the last hit
    assert build(load(path)).panels[0].value_histogram == v            # a load that kept the tensors: the same

    page = report_html.render(build(rec))
    assert page.count('<svg class="hist"') == 2
    assert "distribution at call 1: 27 finite of 32; 3 NaN, 1 +Inf, 1 -Inf" in page
    data = export.to_dict(build(rec))
    assert data["panels"][0]["value_histogram"]["counts"] == list(v.counts)

    events = export.read_tensorboard_histograms(export.write_tensorboard(build(rec), tmp_path / "tb"))
    assert [(step, tag) for step, tag, _, _ in events] == [(1, "value/fc/linear"), (1, "grad/fc/linear")]
    assert events[0][2] == pytest.approx(list(v.edges[1:])) and events[0][3] == [float(c) for c in v.counts]
    try:    # TensorBoard's own reader, where it is installed (not a dependency)
        from tensorboard.backend.event_processing import event_accumulator as ea
    except ImportError:
        return
    acc = ea.EventAccumulator(str(tmp_path / "tb"), size_guidance={ea.HISTOGRAMS: 0})
    acc.Reload()
    (read,) = acc.Histograms("value/fc/linear")
    assert (read.step, read.histogram_value.num, list(read.histogram_value.bucket)) == (1, 27, list(map(float, v.counts)))


def test_summary_probes_keep_no_tensor_and_get_no_histogram(tmp_path):
    path = save([snap(1, 0, None), snap(2, 1, None)], tmp_path / "r.dynstep")
    (panel,) = build(load(path, tensors=False)).panels
    assert panel.value_histogram is None and panel.grad_histogram is None
    assert '<svg class="hist"' not in report_html.render(build(load(path, tensors=False)))


def test_edge_cases_of_one_tensor():
    assert histogram(torch.empty(0), kind="value", call=0, seq=0) is None
    same = histogram(torch.full((5,), 2.0), kind="value", call=0, seq=0)
    assert same.edges[0] == 1.5 and same.edges[-1] == 2.5 and sum(same.counts) == 5
    nan = histogram(torch.full((3,), float("nan")), kind="grad", call=4, seq=9)
    assert nan.counts == () and nan.nan == 3 and nan.finite == 0
    half = histogram(torch.ones(6, dtype=torch.bfloat16), kind="value", call=0, seq=0)
    assert sum(half.counts) == 6


def test_a_recorded_training_run_has_the_histograms_of_its_real_values(tmp_path):
    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    torch.manual_seed(0)
    model, xs = MLP(), [torch.randn(5, 8) for _ in range(3)]
    compiled = torch.compile(model, backend=dynstep.superstep(inner="aot_eager", probe=["module:fc1"],
                                                              actions="record", grads=True))
    with dynstep.session(path=tmp_path / "run.dynstep"):
        for x in xs:
            compiled(x).pow(2).mean().backward()
    lazy, full = load(tmp_path / "run.dynstep", tensors=False), load(tmp_path / "run.dynstep")
    assert len(list((tmp_path / "run.dynstep").glob("chunk-*.safetensors"))) > 1   # streamed: a chunk per flush
    for s_lazy, s_full in [*zip(lazy.all(), full.all())][::-1] + [*zip(lazy.all(), full.all())]:   # chunk to chunk
        assert torch.equal(lazy.tensor_of(s_lazy), s_full.tensor)
    (panel,) = build(lazy).panels
    eager = model.fc1(xs[-1]).detach().double()
    counts, _ = torch.histogram(eager, bins=30, range=(float(eager.min()), float(eager.max())))
    assert panel.value_histogram.call == 2 and panel.value_histogram.counts == tuple(int(c) for c in counts)
    assert panel.grad_histogram is not None and sum(panel.grad_histogram.counts) == 80
