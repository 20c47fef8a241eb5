"""The report model of a recording, its JSON form and its TensorBoard export (synthetic recordings)."""

from __future__ import annotations

import json
import math

import pytest

from dynstep.core.records import Snapshot, Stats
from dynstep.recording.reader import load
from dynstep.recording.storage import save
from dynstep.report import export
from dynstep.report.model import build
from dynstep.recording.facts import CompileEvent, GraphPlan, PlanRow, PlanSite, RunInfo


def snap(seq: int, *, kind="value", node="linear", module="fc", call=0, mean=0.5, nan=0, graph="forward[0/0]"):
    stats = Stats(nan=nan) if nan else Stats(min=mean - 1, max=mean + 1, mean=mean, std=0.5, absmax=abs(mean) + 1,
                                               count=8)
    return Snapshot(kind=kind, probe="module:*", node=node, target="torch.nn.functional.linear", module=module,
                    source="model.py:12", graph=graph, call=call, shape=(2, 4), dtype="float32", device="cpu",
                    stats=stats, site=hash((node, kind)) % 1000, seq=seq, source_text="x = self.fc(x)")


def run(n_calls=4, nan_at=None, nodes=("a", "b")):
    snaps, seq = [], 0
    for call in range(n_calls):
        for kind in ("value", "grad"):
            for node in nodes:
                seq += 1
                bad = nan_at is not None and node == nodes[-1] and kind == "value" and call >= nan_at
                snaps.append(snap(seq, kind=kind, node=node, module=f"m.{node}", call=call, mean=call / 10,
                                  nan=3 if bad else 0))
    return snaps


@pytest.fixture
def recording(tmp_path):
    plan = GraphPlan("forward[0/0]", "0/0", "aot_eager", (("probe", "module:*"),),
                     (PlanRow("a", "torch.nn.functional.linear", "m.a", "model.py:12", "/src/model.py", "x = self.fc(x)",
                              (PlanSite(1, "value", "module:*", ("summary",)),)),))
    events = [CompileEvent("compile", "0/0", "/src/model.py", 10, "forward", "compiling forward"),
              CompileEvent("graph_break", "0/0", "/src/model.py", 14, "forward", "Tensor.item()", source_text="y.item()"),
              CompileEvent("graph_break", "0/1", "/src/model.py", 14, "forward", "Tensor.item()", source_text="y.item()")]
    path = save(run(nan_at=2), tmp_path / "r.dynstep", run=RunInfo.now(), compile=[plan, *events])
    return load(path, tensors=False)


def test_panels_put_each_value_beside_its_gradient_and_find_the_first_nan(recording):
    report = build(recording)
    assert [p.module for p in report.panels] == ["m.a", "m.b"]
    b = report.panels[1]
    assert b.value.calls == (0, 1, 2, 3) and b.grad.calls == (0, 1, 2, 3)
    assert b.value.first_bad == 2 and b.grad.first_bad is None and b.bad
    assert math.isnan(b.value.mean[2]) and b.value.nan == (0, 0, 3, 3)
    first = report.first_nonfinite
    assert (first.node, first.kind, first.call) == ("b", "value", 2) and report.first_nonfinite_panel == b.key
    s = report.summary
    assert (s.snapshots, s.values, s.grads, s.calls, s.graph_breaks, s.compiles) == (16, 8, 8, 4, 2, 1)
    (brk,) = report.events
    assert brk.count == 2 and brk.where == "model.py:14"
    assert report.source_key("model.py:12") == report.source_key("model.py:12", "/src/model.py") != ""


def test_selection_and_the_cap_keep_the_first_nan_in_view(recording):
    assert [p.node for p in build(recording, select=["module:m.a"]).panels] == ["b", "a"]   # the NaN's own first
    capped = build(recording, select=["module:m.a"], max_panels=1)
    assert [p.node for p in capped.panels] == ["b"] and capped.left_out == 1   # the NaN's panel wins the one place


def test_json_has_the_pages_content_with_non_finite_numbers_as_strings(recording):
    data = export.to_dict(build(recording))
    text = json.dumps(data, allow_nan=False)
    assert data["format"] == "dynstep-report" and len(data["hits"]) == 16
    assert data["first_nonfinite"]["node"] == "b" and data["summary"]["graph_breaks"] == 2
    assert data["panels"][1]["value"]["mean"][2] == "nan" and '"nan"' in text
    assert data["graphs"][0]["rows"][0]["sites"][0]["probe"] == "module:*"


def test_tensorboard_export_writes_valid_event_records(recording, tmp_path):
    path = export.write_tensorboard(build(recording), tmp_path / "tb")
    scalars = export.read_tensorboard(path)
    assert (0, "value/m.a/a/mean", 0.0) in scalars
    by_tag = {(tag, step): v for step, tag, v in scalars}
    assert by_tag[("value/m.b/b/nan", 3)] == 3.0 and math.isnan(by_tag[("value/m.b/b/mean", 3)])
    assert by_tag[("grad/m.a/a/mean", 1)] == pytest.approx(0.1)
    assert export.crc32c(b"123456789") == 0xE3069283      # the CRC-32C check value


def test_tensorboards_own_reader_reads_the_export(recording, tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    export.write_tensorboard(build(recording), tmp_path / "tb")
    acc = accumulator.EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert "value/m.a/a/absmax" in acc.Tags()["scalars"]
    assert [e.step for e in acc.Scalars("grad/m.b/b/max")] == [0, 1, 2, 3]
