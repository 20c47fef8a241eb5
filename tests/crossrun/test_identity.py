"""The stable node identity on every recorded hit: how ops are normalised, how it is written and read,
that two runs of one program give every node the same identity, and that recordings made before
identities existed still load and get one."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import dynstep
from dynstep.graph.identity import NodeIdentity, fill_identities, normalize_op


@pytest.mark.parametrize("spellings, canonical", [
    (["torch.tanh", "Tensor.tanh", "Tensor.tanh_", "aten.tanh.default"], "tanh"),
    (["operator.add", "_operator.iadd", "Tensor.__add__", "aten.add.Tensor", "torch.add"], "add"),
    (["_operator.truediv", "aten.div.Tensor", "torch.div"], "div"),
    (["torch.nn.functional.linear", "aten.addmm.default", "aten.mm.default", "_operator.matmul"], "matmul"),
    (["torch.nn.functional.layer_norm", "aten.native_layer_norm.default"], "layer_norm"),
    (["torch.softmax", "aten._softmax.default"], "softmax"),
    (["torch.nn.functional.scaled_dot_product_attention",
      "aten._scaled_dot_product_flash_attention_for_cpu.default"], "scaled_dot_product_attention"),
    (["Tensor.float", "aten._to_copy.default", "prims.convert_element_type.default"], "to"),
])
def test_op_names_are_normalised_across_dynamo_aot_and_aten(spellings, canonical):
    assert {normalize_op(s) for s in spellings} == {canonical}


def test_identity_round_trips_through_its_text():
    ident = NodeIdentity("blocks.0.mlp", "getitem", "model.py", 'y = x["a|b"] # "#3" @ here', 2, output=1)
    text = str(ident)
    assert text.startswith("blocks.0.mlp/getitem[1]@model.py:") and text.endswith("#2")
    assert NodeIdentity.parse(text) == ident
    with pytest.raises(ValueError, match="not a dynstep node identity"):
        NodeIdentity.parse("blocks.0/tanh")


class Looped(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        for _ in range(3):
            x = torch.tanh(self.fc(x))  # one line, three nodes
        return x.sum()


def _record(model, x, probes, inner="aot_eager"):
    compiled = torch.compile(model, backend="superstep", options={"probe": probes, "inner": inner})
    with dynstep.session() as s:
        compiled(x)
        compiled(x)
    return s.all()


def test_every_node_has_the_same_identity_across_two_runs_with_a_reset_between(gpt):
    model, idx = gpt
    first = _record(model, idx, ["*", "op:aten.mm"])
    torch._dynamo.reset()
    second = _record(model, idx, ["*", "op:aten.mm"])
    assert all(h.identity for h in first) and len(first) == len(second)
    assert [(h.kind, h.node, h.identity) for h in first] == [(h.kind, h.node, h.identity) for h in second]
    assert any(NodeIdentity.parse(h.identity).op == "matmul" and h.target.startswith("aten.") for h in first)
    per_call = [h for h in first if h.call == 0]   # one identity per node (of each IR level: aten.mm is linear's)
    assert len({(h.kind, h.target.startswith("aten."), h.identity) for h in per_call}) == len(per_call)


def test_a_line_run_several_times_in_one_call_numbers_its_nodes():
    torch.manual_seed(0)
    hits = _record(Looped(), torch.randn(2, 8), ["op:tanh"])
    idents = [NodeIdentity.parse(h.identity) for h in hits if h.call == 0]
    assert [(i.module, i.op, i.text, i.occurrence) for i in idents] == [
        ("", "tanh", "x = torch.tanh(self.fc(x))  # one line, three nodes", n) for n in range(3)]


def test_a_recording_without_identities_loads_with_identities_from_its_fields(tmp_path):
    torch.manual_seed(0)
    hits = _record(Looped(), torch.randn(2, 8), ["*"])
    session = dynstep.Session()
    session.extend(hits)
    path = session.save(tmp_path / "old.dynstep")
    lines = (path / "records.jsonl").read_text().splitlines()
    stripped = [json.loads(line) for line in lines]
    for meta in stripped:
        del meta["identity"]   # what a recording made before identities existed holds
    (path / "records.jsonl").write_text("".join(json.dumps(m) + "\n" for m in stripped))
    loaded = dynstep.load(path)
    assert not loaded.problems and all(h.identity for h in loaded.all())
    assert [h.identity for h in loaded.all()] == [h.identity for h in fill_identities(
        [dataclasses.replace(h, identity="") for h in hits])]
    tanh = [NodeIdentity.parse(h.identity) for h in loaded.all() if h.target == "torch.tanh" and h.call == 0]
    assert [i.occurrence for i in tanh] == [0, 1, 2]
    assert dynstep.compare(path, path).ok
