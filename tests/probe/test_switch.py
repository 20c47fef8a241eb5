"""dynstep.probes: the run-time switch; a compiled graph is specialised on it through a Dynamo guard."""

import os
import subprocess
import sys

import pytest
import torch

import dynstep
from dynstep import _compat
from dynstep.probe import switch as probes


@pytest.fixture(autouse=True)
def _switch_restored():
    yield
    probes.enable()


def n_probes(gm) -> int:
    return sum(n.target in (torch.ops.dynstep.probe, torch.ops.dynstep.probe.default) for n in gm.graph.nodes)


class Counting:
    """An inner compiler that counts the graphs superstep hands it (and the probes in them)."""

    def __init__(self) -> None:
        self.graphs: list[int] = []
        self.__name__ = "counting"

    def __call__(self, gm, example_inputs):
        self.graphs.append(n_probes(gm))
        return gm.forward


def test_flipping_recompiles_once_per_state_and_records_only_while_on(mlp):
    model, x = mlp
    inner = Counting()
    cm = torch.compile(model, backend="superstep",
                       options={"inner": inner, "probe": ["module:fc1", "module:fc2"], "actions": ["record"]})
    with dynstep.session() as s:
        cm(x)
        probes.disable()
        cm(x)
        cm(x)
        probes.enable()
        cm(x)
        with probes.disabled():
            cm(x)
        cm(x)
    assert inner.graphs == [2, 0]   # one variant with both probes, one with none; then only cache hits
    assert [r.call for r in s.records("module:fc1")] == [0, 1, 2]
    torch.testing.assert_close(s.records("module:fc2")[0].tensor, model(x).detach())


def test_probes_off_is_exactly_plain_inductor(gpt):
    model, idx = gpt
    with probes.disabled():
        out_s, code_s = _compat.run_and_get_code(
            torch.compile(model, backend="superstep", options={"probe": ["module:blocks.*"], "nan": "raise"}), idx)
    torch._dynamo.reset()
    out_p, code_p = _compat.run_and_get_code(torch.compile(model), idx)
    assert torch.equal(out_s, out_p)
    assert code_s == code_p


def test_recompile_reason_names_the_switch(mlp):
    model, x = mlp
    cm = torch.compile(model, backend="superstep", options={"inner": "eager", "probe": ["module:fc1"]})
    cm(x)
    probes.disable()
    cm(x)
    code = model.forward.__code__
    assert any("probes.ENABLED" in r for r in _compat.recompile_reasons(code))


def test_gradient_probes_follow_the_switch(mlp):
    model, x = mlp
    cm = torch.compile(model, backend="superstep",
                       options={"inner": "aot_eager", "probe": ["module:fc1"], "grads": True, "actions": ["record"]})
    with dynstep.session() as s:
        with probes.disabled():
            cm(x).sum().backward()
        cm(x).sum().backward()
    kinds = sorted(r.kind for r in s.records("module:fc1"))
    assert kinds == ["grad", "value"]


def test_hand_placed_probe_follows_the_switch_compiled_and_eager():
    p = dynstep.TensorProbe("mid", [dynstep.RecordAction(8)], when="always")
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(n_probes(gm))
        return gm.forward

    f = torch.compile(lambda x: p(x.sin()) * 2, backend=backend, fullgraph=True)
    x = torch.randn(4)
    f(x)
    with probes.disabled():
        f(x)
        p(x)            # eager: returns its input and does nothing
    f(x)
    p(x)
    assert compiles == [1, 0]
    assert [r.call for r in p.records()] == [0, 1, 2]
    p.close()


def test_pauses_do_not_follow_the_probe_switch(mlp):
    model, x = mlp
    cm = torch.compile(model, backend="superstep",
                       options={"inner": "eager", "pause": ["module:fc1"], "commands": "set value = value * 0; c"})
    with probes.disabled(), torch.no_grad():
        out = cm(x)
        expected = model.fc2(model.act(torch.zeros(4, 16)))
    torch.testing.assert_close(out, expected)


def test_environment_starts_with_probes_off():
    run = subprocess.run([sys.executable, "-c", "import dynstep; print(dynstep.probes.enabled())"],
                         capture_output=True, text=True, env={**os.environ, "DYNSTEP_PROBES": "0"}, timeout=120)
    assert run.stdout.strip() == "False", run.stderr
