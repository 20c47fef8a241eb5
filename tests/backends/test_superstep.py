"""The superstep backend on real torch.compile runs: a transformer and an MLP training step."""

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

import dynstep
from dynstep import _compat
from dynstep.core.events import ProbePrinted, use_sink

from ..conftest import module_outputs_eager

INNERS = ["eager", "aot_eager", pytest.param("inductor", marks=pytest.mark.slow)]


def close(inner, a, b):
    if inner == "inductor":  # fused kernels may round differently
        return torch.allclose(a, b, rtol=1e-5, atol=1e-5)
    return torch.equal(a, b)


def test_transparent_default_is_bitwise_plain_inductor(gpt):
    model, idx = gpt
    out_s, code_s = _compat.run_and_get_code(torch.compile(model, backend="superstep"), idx)
    torch._dynamo.reset()
    out_p, code_p = _compat.run_and_get_code(torch.compile(model), idx)
    assert torch.equal(out_s, out_p)
    assert code_s == code_p
    assert not any("dynstep" in c for c in code_s)


@pytest.mark.parametrize("inner", INNERS)
def test_module_records_equal_forward_hook_values(gpt, inner):
    model, idx = gpt
    names = ["blocks.0.mlp", "blocks.1.mlp", "blocks.0.attn", "blocks.1"]
    expected = module_outputs_eager(model, idx, names)
    cm = torch.compile(model, backend="superstep",
                       options={"inner": inner, "probe": ["module:blocks.*.mlp", "module:blocks.*.attn",
                                                          "module:blocks.1"],
                                "actions": ["summary", "record"]})
    with dynstep.session() as s, torch.no_grad():
        out = cm(idx)
    assert close(inner, out, model(idx))
    for name in names:
        snaps = s.records(f"module:{name}")
        assert len(snaps) == 1, name
        snap = snaps[0]
        assert snap.kind == "value" and snap.module == name and snap.graph == "forward[0/0]"
        assert snap.source.startswith("model.py:") and snap.call == 0
        assert snap.shape == (2, 16, 32) and snap.dtype == "float32" and snap.device == "cpu"
        assert close(inner, snap.tensor, expected[name][0])
        ref = expected[name][0]
        assert snap.stats["absmax"] == pytest.approx(ref.abs().max().item(), rel=1e-5)
        assert snap.stats["mean"] == pytest.approx(ref.double().mean().item(), rel=1e-4, abs=1e-6)
        assert snap.stats["std"] == pytest.approx(ref.double().std().item(), rel=1e-4)
        assert snap.stats["nan"] == 0 and snap.stats["inf"] == 0


@pytest.mark.parametrize("inner", INNERS)
def test_mlp_training_step_values_and_grads(mlp, inner):
    model, x = mlp
    torch.manual_seed(1)
    eager = type(model)()
    eager.load_state_dict(model.state_dict())
    grads_seen: dict[str, list[torch.Tensor]] = {"fc1": [], "act": []}
    for name in grads_seen:
        getattr(eager, name).register_full_backward_hook(
            lambda mod, gin, gout, n=name: grads_seen[n].append(gout[0].detach().clone()))
    values = module_outputs_eager(eager, x, ["fc1", "act"])

    cm = torch.compile(model, backend="superstep",
                       options={"inner": inner, "probe": ["module:fc1", "module:act"],
                                "actions": ["record"], "grads": True})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with dynstep.session() as s:
        for _ in range(2):
            loss = cm(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    eager(x).pow(2).mean().backward()

    v = s.records("module:fc1", kind="value")
    g = s.records("module:fc1", kind="grad")
    assert [snap.call for snap in v] == [0, 1] and [snap.call for snap in g] == [0, 1]
    assert close(inner, v[0].tensor, values["fc1"][0])
    assert close(inner, g[0].tensor, grads_seen["fc1"][0])
    assert close(inner, s.records("module:act", kind="grad")[0].tensor, grads_seen["act"][0])
    # the optimizer step changed the weights: the second call saw different values
    assert not torch.equal(v[0].tensor, v[1].tensor)


def test_line_op_and_node_selectors(gpt):
    model, idx = gpt
    import dynstep.front.demo.model as src

    line = next(i for i, text in enumerate(open(src.__file__).read().splitlines(), 1)
                if "out = self.c_proj(attn)" in text)
    cm = torch.compile(model, backend="superstep",
                       options={"inner": "eager", "actions": ["record"],
                                "probe": [f"line:dynstep/front/demo/model.py:{line}", "op:layer_norm", "node:linear_8"]})
    with dynstep.session() as s, torch.no_grad():
        cm(idx)
    lines = s.records(f"line:model.py:{line}")
    attn = module_outputs_eager(model, idx, ["blocks.0.attn.c_proj", "blocks.1.attn.c_proj"])
    assert [x.source for x in lines] == [f"model.py:{line}"] * 2
    assert torch.equal(lines[0].tensor, attn["blocks.0.attn.c_proj"][0])
    assert torch.equal(lines[1].tensor, attn["blocks.1.attn.c_proj"][0])
    assert len(s.records("op:layer_norm")) == 5
    assert [x.module for x in s.records("op:layer_norm")][-1] == "ln_f"
    assert s.records("node:linear_8")[0].shape == (2, 16, 64)


def test_aten_op_selector_after_aot(gpt):
    model, idx = gpt
    cm = torch.compile(model, backend="superstep", options={"inner": "aot_eager", "probe": ["op:aten.addmm"]})
    with dynstep.session() as s, torch.no_grad():
        cm(idx)
    snaps = s.records("op:aten.addmm")
    assert snaps and all(x.target == "aten.addmm.default" for x in snaps)
    assert {x.module for x in snaps} >= {"blocks.0.attn.c_proj", "blocks.1.mlp.proj"}


def test_aten_selector_with_eager_inner_warns(gpt):
    model, idx = gpt
    cm = torch.compile(model, backend="superstep", options={"inner": "eager", "probe": ["op:aten.addmm"]})
    with pytest.warns(UserWarning, match="exists only after AOTAutograd"):
        cm(idx)


def test_unmatched_selector_warns_with_candidates(gpt):
    model, idx = gpt
    cm = torch.compile(model, backend="superstep", options={"inner": "eager", "probe": ["module:blocks.*.mpl"]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cm(idx)
        cm(idx)
    msgs = [str(w.message) for w in caught if "matched nothing" in str(w.message)]
    assert len(msgs) == 1 and "blocks.0.mlp" in msgs[0]


def test_print_action_goes_through_the_front_end(mlp):
    model, x = mlp
    events = []
    cm = torch.compile(model, backend="superstep",
                       options={"inner": "eager", "probe": ["module:fc2"], "actions": ["print"]})
    with use_sink(events.append):
        cm(x)
        cm(x)
    assert [type(e) for e in events] == [ProbePrinted, ProbePrinted]
    assert events[1].snapshot.call == 1 and events[0].snapshot.module == "fc2"


def test_superstep_callable_and_mode_passthrough(mlp):
    model, x = mlp
    backend = dynstep.superstep(inner="aot_eager", probe=["module:fc1"])
    with dynstep.session() as s:
        torch.compile(model, backend=backend)(x)
    assert len(s.records("module:fc1")) == 1
    seen = {}

    def inner(gm, example_inputs):
        seen["called"] = True
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend="superstep", options={"inner": inner})(x)
    assert seen["called"]


def test_backend_name_works_in_a_fresh_interpreter_without_import():
    code = textwrap.dedent("""
        import torch
        f = torch.compile(lambda x: torch.relu(x) + 1, backend="superstep", options={"inner": "eager", "probe": ["*"]})
        print(f(torch.ones(2)).tolist())
        import dynstep
        print(len(dynstep.default_session()) > 0)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[2.0, 2.0]", "True"]


def test_import_dynstep_does_not_import_inductor_or_rich():
    code = ("import sys, torch; before = set(sys.modules); import dynstep; dynstep.session; dynstep.superstep; "
            "new = set(sys.modules) - before; print([m for m in new if 'inductor' in m or m.startswith('rich')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_public_names_survive_submodule_imports():
    import importlib

    for mod in ("dynstep.probe.sessions", "dynstep.recording.storage", "dynstep.core.records", "dynstep.core.errors",
                "dynstep.core.options"):
        importlib.import_module(mod)
    assert callable(dynstep.session) and callable(dynstep.load) and callable(dynstep.superstep)
    assert isinstance(dynstep.session(), dynstep.Session)


@pytest.mark.parametrize("probe", [[], ["op:sqrt"]])
def test_nan_with_grads_checks_the_gradients_too(probe):
    """Issue 14 item 6: `nan` with grads=True never checked gradients (Inf gradients went by)."""
    def f(x):
        y = x * 1.0
        r = torch.sqrt(y)      # finite at 0; the gradient flowing into y is inf there
        return (r * 3).sum()

    cf = torch.compile(f, backend="superstep",
                       options={"inner": "aot_eager", "nan": "raise", "grads": True, "probe": probe})
    x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    loss = cf(x)                 # the forward is finite
    with pytest.raises(dynstep.NonFiniteError, match=r"1 Inf in the gradient of _operator.mul \(node y\)") as info:
        loss.backward()
    assert info.value.node == "y" and info.value.source.startswith("test_superstep.py:")


def test_overlapping_selectors_probe_each_value_once(gpt):
    """Issue 13 item 3: op:layer_norm and line:<the ln line> gave 7 hits for 5 LayerNorms."""
    model, idx = gpt
    cm = torch.compile(model, backend="superstep", options={
        "inner": "eager", "probe": ["op:layer_norm", "node:layer_norm*", "module:blocks.0.ln1", "*"]})
    with dynstep.session() as s, torch.no_grad():
        cm(idx)
    assert len(s.records("op:layer_norm")) == len(s.records("node:layer_norm*")) == 5
    assert len(s.records("module:blocks.0.ln1")) == 1
    per_node = [r.node for r in s.records()]
    assert len(per_node) == len(set(per_node))              # one hit per value per call
    assert s.records("module:blocks.0.ln1")[0].probe == "op:layer_norm | node:layer_norm* | module:blocks.0.ln1 | *"


def test_a_checkpointed_module_is_probed_at_what_it_returns_and_inside_is_named():
    """Issue 14 item 15: code inside torch.utils.checkpoint could not be probed and the warning
    said 'closest candidates: nothing'."""
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.act = nn.Linear(4, 4), nn.GELU()

        def forward(self, x):
            return self.act(self.fc(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.b0, self.b1 = Block(), Block()

        def forward(self, x):
            return self.b1(checkpoint(self.b0, x, use_reentrant=False))

    torch.manual_seed(0)
    net, x = Net(), torch.randn(2, 4, requires_grad=True)
    cm = torch.compile(net, backend="superstep", options={"inner": "aot_eager", "actions": ["record"],
                                                         "probe": ["module:b0", "in:b0.fc"]})
    with dynstep.session() as s, pytest.warns(UserWarning, match=r"'in:b0.fc' names 1 node\(s\) inside an "
                                              r"activation-checkpointed region .* of b0.*probe what the region "
                                              r"returns \(module:b0\)"):
        cm(x).sum().backward()
    (snap,) = s.records("module:b0")
    assert snap.module == "b0" and torch.equal(snap.tensor, net.b0(x).detach())


def test_the_compile_decision_is_one_frozen_plan(monkeypatch):
    """Issue 27 item 7: superstep decides once per compile what it does with a graph (options after the
    probe switch, stop points, whether a stepper answers), reading the stepper's `stop_points` once."""
    import dataclasses

    from dynstep.backends.superstep import plan_of
    from dynstep.core.options import Options
    from dynstep.probe import switch
    from dynstep.step.stepper import STEPPER

    monkeypatch.delenv("DYNSTEP_PAUSE", raising=False)
    monkeypatch.delenv("DYNSTEP_PROBE", raising=False)
    monkeypatch.setattr(switch, "specialize", lambda: True)   # outside a compile: no guard to add
    assert plan_of(Options.from_mapping({}, environ={})).plain
    paused = plan_of(Options.from_mapping({"pause": ["op:mm"]}, environ={}))
    assert paused.pauses and paused.can_stop and not paused.plain and not paused.everywhere
    nan_stop = plan_of(Options.from_mapping({"nan": "stop"}, environ={}))
    assert nan_stop.can_stop and not nan_stop.pauses
    monkeypatch.setattr(STEPPER, "stop_points", True)   # an editor asked for stop points everywhere
    everywhere = plan_of(Options.from_mapping({}, environ={}))
    assert everywhere.everywhere and everywhere.pauses and not everywhere.plain
    monkeypatch.setattr(STEPPER, "stop_points", False)  # later changes do not reach a plan already made
    assert everywhere.pauses
    with pytest.raises(dataclasses.FrozenInstanceError):
        everywhere.pauses = False  # type: ignore[misc]
    monkeypatch.setattr(switch, "specialize", lambda: False)   # dynstep.probes.disable(): no probe at all
    off = plan_of(Options.from_mapping({"probe": ["op:mm"], "nan": "raise"}, environ={}))
    assert off.opts.probe == () and off.opts.nan is None and off.plain
