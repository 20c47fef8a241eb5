"""What recordings keep besides snapshots: run.json and compile.jsonl, written through and validated on load."""

from __future__ import annotations

import json

import pytest
import torch

import dynstep
from dynstep.core.errors import StorageError
from dynstep.recording.storage import OWN_FILES
from dynstep.recording.facts import CompileEvent, GraphPlan, RunInfo


def step(x):
    h = torch.tanh(x) * 2
    print("graph break")
    return h.exp()


@pytest.fixture
def probed():
    return torch.compile(step, backend="superstep", options={"inner": "eager", "probe": ["op:tanh"]})


def test_a_streamed_recording_keeps_the_run_its_graph_breaks_and_its_plans(tmp_path, probed):
    path = tmp_path / "run.dynstep"
    with dynstep.session(path=path) as s:
        probed(torch.ones(3))
        lines = (path / "compile.jsonl").read_text().splitlines()
        assert any('"graph_break"' in line for line in lines)          # written through, before the session ends
        probed(torch.ones(3))
    rec = dynstep.load(path)
    assert rec.problems == () and len(rec) == 2
    assert isinstance(rec.run, RunInfo) and rec.run.torch == torch.__version__ and rec.run.ended
    (brk,) = [e for e in rec.compile_events if e.kind == "graph_break"]
    assert brk.line == step.__code__.co_firstlineno + 2 and brk.source_text == 'print("graph break")'
    (plan,) = [p for p in rec.plans if p.graph.startswith("step[")]
    row = next(r for r in plan.rows if r.node == "tanh")
    assert row.source == f"test_recording_files.py:{step.__code__.co_firstlineno + 1}" and row.path == __file__
    assert [(x.kind, x.probe) for x in row.sites] == [("value", "op:tanh")]
    assert plan.inner == "eager" and ("probe", "op:tanh") in plan.options
    assert s.run.session == "session"


def test_save_and_resave_keep_the_run_and_the_compile_log(tmp_path, probed):
    with dynstep.session() as s:
        probed(torch.ones(2))
    s.save(tmp_path / "a.dynstep")
    a = dynstep.load(tmp_path / "a.dynstep")
    a.save(tmp_path / "b.dynstep")
    b = dynstep.load(tmp_path / "b.dynstep")
    assert a.run == b.run and a.compile == b.compile and any(isinstance(e, GraphPlan) for e in b.compile)
    s.save(tmp_path / "a.dynstep")   # replacing a recording that holds run.json and compile.jsonl


def test_a_recording_keeps_its_own_compile_events_and_the_plans_its_hits_name(tmp_path, probed):
    with dynstep.session(path=tmp_path / "first.dynstep"):
        probed(torch.ones(2))                       # compiles here: a graph break, the plan
    with dynstep.session(path=tmp_path / "second.dynstep") as s:
        probed(torch.ones(2))                       # no compile: the graph was compiled before
    s.save(tmp_path / "saved.dynstep")
    for name in ("second.dynstep", "saved.dynstep"):
        rec = dynstep.load(tmp_path / name)
        assert rec.compile_events == []             # the graph break belongs to the first recording
        assert [p.graph for p in rec.plans] == [rec.all()[0].graph]   # the plan its hits name, once


def test_a_plan_holds_only_the_sites_of_its_own_compile(tmp_path, probed):
    probed(torch.ones(2))
    torch.compiler.reset()                          # graph ids start again: the next compile is step[0/0] too
    with dynstep.session() as s:
        probed(torch.ones(2))
    s.save(tmp_path / "r.dynstep")
    (plan,) = [p for p in dynstep.load(tmp_path / "r.dynstep").plans if p.graph == "step[0/0]"]
    (tanh,) = [r for r in plan.rows if r.node == "tanh"]
    assert len(tanh.sites) == 1


def test_tensors_false_reads_no_chunk(tmp_path):
    f = torch.compile(torch.tanh, backend="superstep", options={"inner": "eager", "probe": ["*"], "actions": ["record"]})
    with dynstep.session(path=tmp_path / "r.dynstep"):
        f(torch.ones(2))
    assert dynstep.load(tmp_path / "r.dynstep").all()[0].tensor is not None
    light = dynstep.load(tmp_path / "r.dynstep", tensors=False)
    assert light.all()[0].tensor is None and light.all()[0].stats.count == 2 and light.problems == ()


def test_bad_compile_lines_and_run_json_are_problems_not_crashes(tmp_path, probed):
    path = tmp_path / "r.dynstep"
    with dynstep.session(path=path):
        probed(torch.ones(2))
    good = (path / "compile.jsonl").read_text()
    bad = ['{"type": "event", "kind": "graph_break", "line": "seven"}', '{"type": "hologram"}', "not json",
           '{"type": "event", "kind": "explosion", "compile_id": "", "file": "", "line": 0, "function": "", "reason": ""}']
    (path / "compile.jsonl").write_text(good + "\n".join(bad) + '\n{"type": "ev')
    (path / "run.json").write_text('{"dynstep": 3}')
    with pytest.warns(RuntimeWarning, match="problem"):
        rec = dynstep.load(path)
    assert len(rec) == 1 and rec.run is None and rec.compile_events
    text = "\n".join(rec.problems)
    assert "run.json cannot be read" in text and "RunInfo.dynstep must be a string" in text
    assert "CompileEvent: field 'compile_id' is missing" in text
    assert "not an entry this dynstep knows (type 'hologram')" in text
    assert "is not JSON" in text and "CompileEvent.kind must be one of" in text
    assert "compile.jsonl: ignored 12 trailing byte(s)" in text


def test_the_new_files_are_dynsteps_own():
    for name in ("run.json", "run.json.tmp", "compile.jsonl"):
        assert OWN_FILES.match(name)
    assert not OWN_FILES.match("compile.json") and not OWN_FILES.match("run.jsonl")


def test_a_recording_older_than_these_files_loads_without_them(tmp_path, probed):
    path = tmp_path / "old.dynstep"
    with dynstep.session(path=path):
        probed(torch.ones(2))
    (path / "run.json").unlink()
    (path / "compile.jsonl").unlink()
    rec = dynstep.load(path)
    assert rec.problems == () and rec.run is None and rec.compile == () and len(rec) == 1


def test_a_foreign_file_still_blocks_replacing(tmp_path, probed):
    path = tmp_path / "r.dynstep"
    with dynstep.session(path=path):
        probed(torch.ones(2))
    (path / "compile.json").write_text(json.dumps({}))
    with pytest.raises(StorageError, match="compile.json"):
        dynstep.session(path=path)


def test_event_records_round_trip_through_json():
    from dynstep.recording.facts import from_json, to_json

    e = CompileEvent("recompile", "0/1", "/a/b.py", 3, "f", "guard failed: k == 2", "x", "y = f(k)", 2)
    assert from_json(CompileEvent, to_json(e)) == e
    with pytest.raises(ValueError, match="CompileEvent.line must be an integer"):
        from_json(CompileEvent, {**to_json(e), "line": True})
