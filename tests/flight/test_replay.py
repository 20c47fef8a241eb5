"""`dynstep flight replay DUMP` (and `dynstep.flight.replay.replay`): the dumped graph call is re-run,
reproduces the bad value, and the diff names where NaN first appears."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

import dynstep
from dynstep.flight.graphio import graph_from_json, graph_json, input_name
from dynstep.flight import replay
from dynstep.front.demo.model import make

from ..conftest import ROOT
from .loops import regression, tiny


def only(path):
    (found,) = [p for p in path.iterdir() if p.is_dir() and not p.name.endswith(".replay")]
    return found


def test_a_replay_reproduces_the_bad_value_and_the_diff_names_the_node(dumps):
    """A batch of finite values so large that the first layer overflows: the graph makes the Inf itself."""
    regression(steps=6, huge_at=4, flight={"steps": 3, "path": str(dumps)})
    dump = only(dumps)
    result = replay(dump)
    trigger = dynstep.load(dump).trigger
    assert (trigger.kind, trigger.step, trigger.module) == ("nonfinite", 4, "fc1")
    assert result.node == trigger.node and result.step == 4 and result.reproduced is True
    assert result.compiled.inf == result.dumped.inf == result.eager.inf > 0 and result.nonfinite_inputs == ()
    (graph,) = result.diff.graphs
    for origin in (graph.nan_eager, graph.nan_compiled):                  # where NaN/Inf first appears, both ways
        assert (origin.node, origin.module, origin.source) == (trigger.node, "fc1", trigger.source)
    assert result.verdict.startswith("the inputs (data or weights): eager makes the same NaN/Inf")
    probed = dynstep.load(result.recording)
    assert trigger.node in {s.node for s in probed.all()} and len({s.node for s in probed.all()}) == 4


def test_a_replay_names_the_input_that_brought_the_inf(dumps):
    regression(steps=6, inf_at=4, flight={"steps": 3, "path": str(dumps)})
    result = replay(only(dumps))
    assert result.reproduced is True and result.nonfinite_inputs == ("x",)
    assert result.diff.graphs[0].nan_eager is None                       # no node makes it: it came in with x
    assert "the inputs already hold NaN/Inf: x" in result.verdict


def test_a_replay_of_a_nan_weight_blames_the_weight(dumps):
    tiny(steps=7, nan_at=5, flight={"steps": 3, "path": str(dumps)})
    result = replay(only(dumps))
    assert result.reproduced is True and result.dumped.nan == result.compiled.nan == result.eager.nan == 32
    assert result.nonfinite_inputs == ("blocks.1.mlp.fc.weight",)
    assert "eager makes the same NaN/Inf" in result.verdict


def test_the_replay_verb_prints_the_verdict_and_writes_the_diff(dumps, tmp_path):
    regression(steps=5, huge_at=3, flight={"steps": 2, "path": str(dumps)})
    out = subprocess.run([sys.executable, "-m", "dynstep", "flight", "replay", str(only(dumps)), "--json",
                          str(tmp_path / "diff.json"), "-o", str(tmp_path / "probed")], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "reproduced: yes" in out.stdout and "verdict: the inputs (data or weights)" in out.stdout
    assert json.loads((tmp_path / "diff.json").read_text())["graphs"][0]["nan_eager"]["module"] == "fc1"
    assert len(dynstep.load(tmp_path / "probed")) > 0


def test_a_dump_without_a_kept_call_says_why_it_cannot_be_replayed(dumps):
    tiny(steps=5, nan_at=3, flight={"steps": 2, "path": str(dumps), "inputs": 0})
    dump = only(dumps)
    assert "no graph call was kept" in dynstep.load(dump).flight.replay
    out = subprocess.run([sys.executable, "-m", "dynstep", "flight", "replay", str(dump)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "holds no graph call to replay (no graph call was kept" in out.stderr


def test_a_graph_travels_as_json_with_its_names_modules_and_lines():
    model, idx = make(seed=0, layers=1)
    seen = {}

    def keep(gm, example_inputs):
        seen["gm"] = gm
        return gm.forward

    torch.compile(model, backend=keep)(idx)
    gm = seen["gm"]
    again = graph_from_json(json.loads(json.dumps(graph_json(gm))), {})
    from dynstep.graph import info as gi

    pairs = list(zip(gm.graph.nodes, again.graph.nodes))
    assert len(pairs) == len(gm.graph.nodes)
    assert all((a.name, gi.module_path(a), gi.source(a)) == (b.name, gi.module_path(b), gi.source(b)) for a, b in pairs)
    params = dict(model.named_parameters())
    names = [input_name(n.name) for n in gm.graph.nodes if n.op == "placeholder"]
    assert names[0] == "idx" and set(names[1:]) == set(params)                 # as the user names them
    inputs = [idx] + [params[name] for name in names[1:]]
    assert torch.equal(again(*inputs)[0], gm(*inputs)[0])
