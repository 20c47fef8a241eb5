"""`dynstep.compare` on hand-made runs (alignment, steps, values against statistics, the JSON shape) and
`dynstep compare` on bad input (exit 2, saying what was wrong)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import dynstep
from dynstep.core.records import Snapshot, Stats
from dynstep.graph.identity import of_fields

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def hit(seq, module, target, line, text, value, *, call=0, node=None, tensor=True, occurrence=0, kind="value"):
    t = torch.as_tensor(value, dtype=torch.float32)
    finite = t[torch.isfinite(t)].double()
    stats = Stats(min=float(finite.min()), max=float(finite.max()), mean=float(finite.mean()),
                  std=float(finite.std()) if finite.numel() > 1 else 0.0, absmax=float(finite.abs().max()),
                  nan=int(t.isnan().sum()), inf=int(t.isinf().sum()), count=t.numel())
    ident = str(of_fields(module, target, f"model.py:{line}", text, occurrence))
    return Snapshot(kind=kind, probe="*", node=node or target.rsplit(".", 1)[-1], target=target, module=module,
                    source=f"model.py:{line}", graph="forward[0/0]", call=call, shape=tuple(t.shape), dtype="float32",
                    device="cpu", stats=stats, tensor=t if tensor else None, seq=seq, source_text=text, identity=ident)


def run_a(steps=1, tensor=True):
    out = []
    for step in range(steps):
        base = 10 * step
        out += [hit(base + 0, "fc1", "torch.nn.functional.linear", 10, "h = self.fc1(x)", [1.0, 2.0, 3.0 + step],
                    call=step, tensor=tensor),
                hit(base + 1, "act", "torch.tanh", 11, "h = torch.tanh(h)", [0.5, 0.25, 0.125 + step],
                    call=step, tensor=tensor),
                hit(base + 2, "fc2", "torch.nn.functional.linear", 12, "return self.fc2(h)", [4.0, 5.0, 6.0],
                    call=step, tensor=tensor)]
    return out


def test_identical_runs_do_not_differ():
    cmp = dynstep.compare(run_a(2), run_a(2))
    assert cmp.ok and cmp.compared == 6 and dict(cmp.aligned)["exact"] == 3
    assert cmp.unmatched.a_only == () and cmp.unmatched.b_only == ()


def test_a_shifted_line_still_matches_exactly_and_a_changed_op_by_module():
    b = run_a()
    b[0] = hit(0, "fc1", "torch.nn.functional.linear", 14, "h = self.fc1(x)", [1.0, 2.0, 3.0])   # lines moved
    b[1] = hit(1, "act", "torch.relu", 15, "h = torch.relu(h)", [0.6, 0.25, 0.125])              # another op
    cmp = dynstep.compare(run_a(), b)
    d = cmp.first_divergence
    assert d is not None and (d.module, d.op, d.match, d.compared) == ("act", "torch.tanh", "module", "values")
    assert (d.a.source, d.b.source) == ("model.py:11", "model.py:15") and d.b.op == "torch.relu"
    assert math.isclose(d.max_abs, 0.1, rel_tol=1e-5)
    assert dict(cmp.aligned) == {"exact": 2, "module+op": 0, "module": 1}


def test_an_edited_line_matches_by_module_and_op_and_extra_nodes_are_listed():
    b = run_a()
    b[1] = hit(1, "act", "torch.tanh", 11, "h = torch.tanh(h)  # edited", [0.5, 0.25, 0.125])
    b.append(hit(3, "fc3", "torch.nn.functional.linear", 13, "h = self.fc3(h)", [1.0]))
    a = run_a() + [hit(4, "head", "torch.softmax", 20, "return h.softmax(-1)", [0.1, 0.9])]
    cmp = dynstep.compare(a, b)
    assert cmp.ok and dict(cmp.aligned) == {"exact": 2, "module+op": 1, "module": 0}
    assert [r.module for r in cmp.unmatched.a_only] == ["head"] and [r.module for r in cmp.unmatched.b_only] == ["fc3"]


def test_statistics_are_compared_when_a_run_kept_no_tensors():
    b = run_a(tensor=False)
    b[2] = hit(2, "fc2", "torch.nn.functional.linear", 12, "return self.fc2(h)", [4.0, 5.0, 6.1], tensor=False)
    d = dynstep.compare(run_a(), b).first_divergence
    assert d is not None and d.compared == "stats" and d.module == "fc2" and d.stat in ("mean", "max", "absmax", "std")
    assert dynstep.compare(run_a(tensor=False), run_a()).ok


def test_tolerances_decide():
    b = run_a()
    b[0] = hit(0, "fc1", "torch.nn.functional.linear", 10, "h = self.fc1(x)", [1.0, 2.0, 3.001])
    assert not dynstep.compare(run_a(), b).ok                  # 1e-3 apart: float32 default allows 1e-4 * 3 + 1e-5
    assert dynstep.compare(run_a(), b, rtol=1e-3).ok
    assert dynstep.compare(run_a(), b, atol=1e-3).ok


def test_steps_pick_one_step_or_a_step_of_each_run():
    run = run_a(2)
    assert not dynstep.compare(run, run, steps=(0, 1)).ok     # one run's step 0 against its step 1
    d = dynstep.compare(run, run, steps=(0, 1)).first_divergence
    assert (d.module, d.a.step, d.b.step) == ("fc1", 0, 1)
    assert dynstep.compare(run, run, steps=1).ok and dynstep.compare(run, run, steps=1).compared == 3
    with pytest.raises(dynstep.DynstepError, match="steps must be"):
        dynstep.compare(run, run, steps=(0, -1))


def test_json_has_the_public_shape(tmp_path):
    b = run_a()
    b[1] = hit(1, "act", "torch.tanh", 11, "h = torch.tanh(h)", [0.5, 0.25, float("nan")])
    data = json.loads(dynstep.compare(run_a(), b).to_json())
    first = data["first_divergence"]
    assert {"module", "source", "line_text", "op", "node", "a", "b"} <= set(first)
    assert (first["module"], first["source"], first["line_text"], first["op"]) == (
        "act", "model.py:11", "h = torch.tanh(h)", "torch.tanh")
    assert first["b"]["stats"]["nan"] == 1 and set(data["unmatched"]) == {"a_only", "b_only"}
    assert json.loads(dynstep.compare(run_a(), run_a()).to_json())["first_divergence"] is None


def test_recordings_compare_from_disk_and_the_page_draws_both_runs(tmp_path):
    for name, hits in (("a", run_a(3)), ("b", run_a(3)[:-1])):
        session = dynstep.Session()
        session.extend(hits)
        session.save(tmp_path / f"{name}.dynstep")
    cmp = dynstep.compare(tmp_path / "a.dynstep", tmp_path / "b.dynstep")
    assert cmp.ok and cmp.compared == 8
    page = cmp.to_html(str(tmp_path / "cmp.html"))
    assert "Per-module curves" in page and page.count("<svg class='chart'") == 3 and "per step" in page


def _dynstep(*args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "dynstep", "compare", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_exit_codes_and_bad_input(tmp_path):
    for name, hits in (("a", run_a(2)), ("b", run_a(2)[:3] + [hit(9, "act", "torch.tanh", 11, "h = torch.tanh(h)",
                                                                       [9.0], call=1)])):
        session = dynstep.Session()
        session.extend(hits)
        session.save(tmp_path / f"{name}.dynstep")
    same = _dynstep("a.dynstep", "a.dynstep", cwd=tmp_path)
    assert same.returncode == 0 and "no node differs" in same.stdout, same.stdout + same.stderr
    differs = _dynstep("a.dynstep", "b.dynstep", "--json", cwd=tmp_path)
    assert differs.returncode == 1, differs.stdout + differs.stderr
    data = json.loads(differs.stdout)
    assert data["first_divergence"]["module"] == "act" and data["first_divergence"]["b"]["step"] == 1
    missing = _dynstep("a.dynstep", "nowhere.dynstep", cwd=tmp_path)
    assert missing.returncode == 2 and "nowhere.dynstep" in missing.stderr and "not a dynstep recording" in missing.stderr
    bad = _dynstep("a.dynstep", "b.dynstep", "--steps", "one", cwd=tmp_path)
    assert bad.returncode == 2 and "expected a step number" in bad.stderr


def test_two_ranks_of_one_recording():
    rank0 = run_a()
    rank1 = [dataclasses.replace(h, rank=1, seq=h.seq + 100) for h in run_a()]
    changed = hit(102, "fc2", "torch.nn.functional.linear", 12, "return self.fc2(h)", [4.0, 5.0, 7.0])
    rank1[2] = dataclasses.replace(changed, rank=1)
    job = rank0 + rank1
    assert dynstep.compare(job, job).ok                       # rank 0 of each, with a note saying so
    assert "ranks [0, 1]" in dynstep.compare(job, job).notes[0]
    d = dynstep.compare(job, job, ranks=(0, 1)).first_divergence
    assert d is not None and d.module == "fc2"
    with pytest.raises(dynstep.DynstepError, match="no rank 3"):
        dynstep.compare(job, job, ranks=(0, 3))
