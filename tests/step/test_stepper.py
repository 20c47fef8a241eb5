"""The stepper through the scripted front end, on the bundled transformer, under eager,
aot_eager and Inductor: what the user sees (events) and what the program computes (values)."""

from __future__ import annotations

import sys

import pytest
import torch

import dynstep
from dynstep.front.demo.model import make
from dynstep.core.events import (CommandFailed, Evaluated, GraphShown, HelpShown, Info, Stopped, WhereShown)
from dynstep.step.graphs import GRAPHS

ATTN = "module:blocks.0.attn"


def compiled(inner: str, **options):
    model, idx = make(layers=1)
    model.eval()
    return model, idx, torch.compile(model, backend=dynstep.superstep(inner=inner, **options))


def stops(events) -> list[Stopped]:
    return [e for e in events if isinstance(e, Stopped)]


@pytest.mark.parametrize("inner", ["eager", "aot_eager", "inductor"])
def test_set_changes_output_exactly_as_in_eager(inner, events):
    model, idx, cm = compiled(inner, pause=[ATTN], commands="set value = value.clamp(-0.1, 0.1) * 2; c")
    with torch.no_grad():
        out = cm(idx)
        handle = model.blocks[0].attn.register_forward_hook(lambda m, i, o: o.clamp(-0.1, 0.1) * 2)
        expected = model(idx)
        handle.remove()
        plain = model(idx)
    assert [s.site.node for s in stops(events)] == ["out"]
    assert stops(events)[0].site.module == "blocks.0.attn.c_proj"
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert (out - plain).abs().max() > 1e-2       # the change really reached the output


@pytest.mark.parametrize("inner", ["eager", "aot_eager"])
def test_step_visits_nodes_in_execution_order(inner, events):
    _, idx, cm = compiled(inner, step=True, commands="s; s; s; s; s; s; c")
    with torch.no_grad():
        cm(idx)
    seen = [s.site.node for s in stops(events)]
    graph = GRAPHS.get(stops(events)[0].site.graph)
    order = [row.node for row in graph.rows if row.site is not None]
    assert seen == order[:7]
    assert [s.reason for s in stops(events)] == ["step"] * 7


def _broken(x):
    y = torch.sin(x) * 3
    torch._dynamo.graph_break()
    return torch.cos(y) + 1


@pytest.mark.parametrize("options", [{"pause": ["op:sin", "op:add"]}, {"pause": ["op:sin"], "step": True}])
def test_step_crosses_graph_break(options, events):
    fn = torch.compile(_broken, backend=dynstep.superstep(inner="aot_eager", commands="s; s; s; c", **options))
    fn(torch.randn(4))
    seen = [(s.site.graph, s.site.target.rsplit(".", 1)[-1], s.reason) for s in stops(events)]
    assert [t for _, t, _ in seen] == ["sin", "mul", "cos", "add"]
    assert [r for _, _, r in seen[1:3]] == ["step", "step"]
    assert seen[1][0] != seen[2][0]               # the third stop is in the graph after the break


def test_graph_without_a_match_has_no_stop_points_so_step_runs_past_it(events):
    fn = torch.compile(_broken, backend=dynstep.superstep(inner="eager", pause=["op:sin"], commands="s; s; c"))
    fn(torch.randn(4))
    assert [s.site.target.rsplit(".", 1)[-1] for s in stops(events)] == ["sin", "mul"]


def test_print_binds_value_node_inputs_and_user_names(events):
    _, idx, cm = compiled("eager", pause=[ATTN], commands="p attn.shape; p out is value; p value.shape; c")
    with torch.no_grad():
        cm(idx)
    texts = [e.text for e in events if isinstance(e, Evaluated)]
    assert texts == ["torch.Size([2, 16, 32])", "True", "torch.Size([2, 16, 32])"]


def test_where_graph_help(events):
    _, idx, cm = compiled("eager", pause=[ATTN], commands="w; g; help; c")
    with torch.no_grad():
        cm(idx)
    where = next(e for e in events if isinstance(e, WhereShown))
    assert where.module == "blocks.0.attn.c_proj"
    assert any("self.c_proj(attn)" in text and n == where.line for n, text in where.lines)
    assert any("test_stepper.py" in frame for frame in where.stack)
    listing = next(e for e in events if isinstance(e, GraphShown))
    assert listing.current == "out" and "out" in [r.node for r in listing.rows]
    names = [n for n, _ in next(e for e in events if isinstance(e, HelpShown)).entries]
    for expected in ("continue, c, cont", "step, s", "next, n", "print, p", "set", "quit, q, exit", "watch", "record"):
        assert expected in names


def test_next_goes_to_the_next_selected_node(events):
    _, idx, cm = compiled("aot_eager", pause=["op:layer_norm"], commands="n; n; c")
    with torch.no_grad():
        cm(idx)
    assert [(s.site.node, s.reason) for s in stops(events)] == [
        ("layer_norm", "pause"), ("layer_norm_1", "pause"), ("layer_norm_2", "pause")]


def test_break_and_clear(events):
    _, idx, cm = compiled("eager", pause=[ATTN], commands="b op:gelu; c; cl; c")
    with torch.no_grad():
        cm(idx)
        cm(idx)                                   # cleared: the second call never stops
    assert [(s.site.node, s.reason) for s in stops(events)] == [("out", "pause"), ("h", "break")]


def test_watch_shown_at_every_stop_and_record_into_session(events):
    _, idx, cm = compiled("eager", pause=[ATTN], commands="watch value.shape[-1]; record; s; c")
    with dynstep.session() as session, torch.no_grad():
        cm(idx)
    assert stops(events)[1].watches == (("value.shape[-1]", "32"),)
    (snap,) = session.records()
    assert snap.node == "out" and snap.tensor.shape == (2, 16, 32)


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_27_09_a_value_recorded_at_a_pause_keeps_its_place_in_hit_order(inner, events):
    """Issue 27 item 9: the REPL's `record` built its Snapshot without `seq`, so its copy sorted before
    every probe hit of the run. Under a session, a `record` at the pause after blocks.0.ln1 and before
    blocks.0.ln2 and ln_f sorts between their hits."""
    _, idx, cm = compiled(inner, pause=[ATTN], probe=["op:layer_norm"], commands="record; c")
    with dynstep.session() as session, torch.no_grad():
        cm(idx)
    hits = session.records()
    assert [(s.module, s.node) for s in hits] == [
        ("blocks.0.ln1", hits[0].node), ("blocks.0.attn.c_proj", "out"), ("blocks.0.ln2", hits[2].node),
        ("ln_f", hits[3].node)]
    assert hits[1].probe == ATTN and hits[1].tensor is not None
    assert 0 < hits[0].seq < hits[1].seq < hits[2].seq < hits[3].seq


def test_quit_raises_abort(events):
    _, idx, cm = compiled("eager", pause=[ATTN], commands="q")
    with pytest.raises(dynstep.Abort, match="quit at node out"):
        with torch.no_grad():
            cm(idx)


def test_script_running_out_continues_to_the_end(events):
    _, idx, cm = compiled("eager", pause=["op:layer_norm"], commands="p 1 + 1")
    with torch.no_grad():
        cm(idx)
        cm(idx)
    assert len(stops(events)) == 1
    assert any(isinstance(e, Info) and "ran out" in e.message for e in events)


def test_bad_commands_are_reported_not_raised(events):
    _, idx, cm = compiled("eager", pause=[ATTN], commands="set value = torch.ones(3); frobnicate; p nope; c")
    with torch.no_grad():
        cm(idx)
    failed = [e.message for e in events if isinstance(e, CommandFailed)]
    assert "shape [3]" in failed[0] and "[2, 16, 32]" in failed[0]
    assert "unknown command 'frobnicate'" in failed[1]
    assert "NameError" in failed[2]


def test_no_terminal_and_no_commands_warns_once_and_continues(events, monkeypatch):
    monkeypatch.setattr(sys, "stdin", open("/dev/null"))
    _, idx, cm = compiled("eager", pause=["op:layer_norm"])
    with torch.no_grad():
        cm(idx)
        cm(idx)
    warnings = [e for e in events if isinstance(e, Info) and "not a terminal" in e.message]
    assert len(warnings) == 1 and not stops(events)


def test_pdb_frontend_stops_with_the_tensor_in_locals(events, monkeypatch):
    seen = {}

    def hook(*args, **kwargs):
        frame = sys._getframe(1)
        seen.update(frame.f_locals)
        frame.f_locals["value"] = frame.f_locals["value"] * 0    # rebinding, as typed in pdb

    monkeypatch.setattr(sys, "breakpointhook", hook)
    model, idx, cm = compiled("aot_eager", pause=[ATTN], frontend="pdb")
    with torch.no_grad():
        out = cm(idx)
        handle = model.blocks[0].attn.register_forward_hook(lambda m, i, o: o * 0)
        expected = model(idx)
        handle.remove()
    assert isinstance(seen["value"], torch.Tensor) and seen["value"].shape == (2, 16, 32)
    assert seen["node"] == "out" and seen["module"] == "blocks.0.attn.c_proj" and "attn" in seen
    assert callable(seen["dynstep_cmd"])
    torch.testing.assert_close(out, expected)


def test_graphs_without_pause_selectors_get_no_stop_points():
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(x):
        return torch.relu(x) + 1

    for pause in (["op:nonexistent_op"], ["op:relu"]):
        torch._dynamo.reset()
        with pytest.warns(UserWarning, match="matched nothing") if pause[0].endswith("_op") else _nothing():
            torch.compile(fn, backend=dynstep.superstep(inner=capture, pause=pause, commands="c"))(torch.randn(3))
    pauses = [sum(n.target is torch.ops.dynstep.pause.default for n in g.graph.nodes) for g in graphs]
    # unmatched: one plain compile; matched: the variant with stop points and the plain variant
    assert pauses == [0, 2, 0]


def test_plain_variant_runs_when_no_stop_can_happen(events):
    from dynstep.step.stepper import STEPPER

    def fn(x):
        return torch.relu(x) * 2

    cf = torch.compile(fn, backend=dynstep.superstep(inner="eager", pause=["op:relu"], commands="c; c"))
    cf(torch.randn(3))                      # stops at relu, continues
    assert STEPPER.hits and sum(STEPPER.hits.values()) == 2   # relu's pause and the mul's step point
    STEPPER.disabled.add("op:relu")         # what `clear` does: nothing can stop in this graph now
    before = dict(STEPPER.hits)
    out = cf(torch.tensor([-1.0, 2.0]))
    assert torch.equal(out, torch.tensor([0.0, 4.0]))
    assert dict(STEPPER.hits) == before     # the plain variant ran: no stop point was even called
    STEPPER.disabled.discard("op:relu")
    cf(torch.randn(3))                      # live again: stops (the script's second `c`)
    assert sum(isinstance(e, Stopped) for e in events) == 2


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_nan_stop_pauses_at_the_first_nonfinite_value(events):
    def fn(x):
        return torch.log(x - 2).exp() * 2

    cm = torch.compile(fn, backend=dynstep.superstep(inner="eager", nan="stop", commands="p value; set value = 0; c"))
    cm(torch.ones(3))
    (stop,) = stops(events)
    assert stop.reason == "nan" and stop.site.target.endswith("log") and not stop.writable
    assert "NaN" in stop.note
    assert any(isinstance(e, CommandFailed) and "read-only" in e.message for e in events)


def test_pause_in_a_training_forward(events):
    model, idx = make(layers=1)
    cm = torch.compile(model, backend=dynstep.superstep(inner="aot_eager", pause=[ATTN], commands="set value = value * 0; c"))
    out = cm(idx)
    out.sum().backward()
    grad = model.head.weight.grad.clone()
    model.zero_grad()
    handle = model.blocks[0].attn.register_forward_hook(lambda m, i, o: o * 0)
    expected = model(idx)
    expected.sum().backward()
    handle.remove()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, model.head.weight.grad)


def test_commands_and_pause_from_the_environment(events, monkeypatch):
    monkeypatch.setenv("DYNSTEP_PAUSE", "op:layer_norm")
    monkeypatch.setenv("DYNSTEP_COMMANDS", "p value.shape; c")
    _, idx, cm = compiled("eager")
    with torch.no_grad():
        cm(idx)
    assert [s.site.node for s in stops(events)][:1] == ["layer_norm"]
    assert any(isinstance(e, Evaluated) and e.text == "torch.Size([2, 16, 32])" for e in events)


@pytest.mark.parametrize("inner", ["eager", "aot_eager"])
def test_pause_in_the_backward_graph_at_the_gradient(events, mlp, inner):
    model, x = mlp
    grads = []
    cm = torch.compile(model, backend=dynstep.superstep(
        inner=inner, pause=["module:fc1"], grads=True, commands="c; p value.abs().sum().item(); set value = value * 0; c"))
    cm(x).pow(2).mean().backward()
    stopped = [e for e in events if isinstance(e, Stopped)]
    assert [e.site.kind for e in stopped] == ["pause", "grad"]
    assert "gradient flowing into" in stopped[1].note and not stopped[1].writable
    printed = [e.text for e in events if isinstance(e, Evaluated)]
    eager = type(model)()
    eager.load_state_dict(model.state_dict())
    eager.fc1.register_full_backward_hook(lambda m, gi, go: grads.append(go[0].detach().clone()))
    eager(x).pow(2).mean().backward()
    assert float(printed[0]) == pytest.approx(grads[-1].abs().sum().item(), rel=1e-5)
    assert any("read-only" in e.message for e in events if isinstance(e, CommandFailed))
