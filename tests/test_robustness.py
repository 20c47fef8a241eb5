"""Probes under graph breaks, recompiles, dynamic shapes, fullgraph, nesting, no_grad, odd dtypes, NaN."""

import warnings

import pytest
import torch

import dynstep


def compiled(fn, **options):
    options.setdefault("inner", "eager")
    return torch.compile(fn, backend="superstep", options=options)


def test_graph_break_gives_two_graphs_with_probes():
    def f(x):
        y = torch.relu(x) * 2
        print("graph break here")
        return torch.tanh(y) + 1

    cf = compiled(f, probe=["op:relu", "op:tanh"])
    x = torch.randn(5)
    with dynstep.session() as s:
        out = cf(x)
    assert torch.equal(out, torch.tanh(torch.relu(x) * 2) + 1)
    relu, tanh = s.records("op:relu"), s.records("op:tanh")
    assert len(relu) == 1 and len(tanh) == 1
    assert relu[0].graph != tanh[0].graph  # two graphs, each with its own stable id


def test_recompile_on_new_shape_and_call_index():
    cf = compiled(lambda x: torch.sin(x) * 3, probe=["op:sin"], actions=["record"])
    with dynstep.session() as s:
        cf(torch.randn(3))
        cf(torch.randn(3))
        cf(torch.randn(4, 2))
    snaps = s.records("op:sin")
    assert [x.shape for x in snaps] == [(3,), (3,), (4, 2)]
    assert snaps[0].graph == snaps[1].graph != snaps[2].graph
    assert [x.call for x in snaps[:2]] == [0, 1]


@pytest.mark.parametrize("inner", ["eager", "aot_eager"])
def test_dynamic_shapes(inner):
    cf = torch.compile(lambda x: torch.cos(x).sum(0), backend="superstep", dynamic=True,
                       options={"inner": inner, "probe": ["op:cos"], "actions": ["record"]})
    with dynstep.session() as s:
        for n in (3, 5, 7):
            x = torch.randn(n, 2)
            assert torch.equal(cf(x), torch.cos(x).sum(0))
    snaps = s.records("op:cos")
    assert [x.shape for x in snaps] == [(3, 2), (5, 2), (7, 2)]
    assert len({x.graph for x in snaps}) == 1  # one symbolic graph


def test_fullgraph_and_nested_compiled_functions():
    inner_fn = compiled(lambda x: torch.exp(x), probe=["op:exp"])

    @torch.compile(backend="superstep", fullgraph=True, options={"inner": "eager", "probe": ["op:sigmoid"]})
    def outer(x):
        return inner_fn(torch.sigmoid(x)) + 1

    with dynstep.session() as s:
        outer(torch.randn(4))
    # torch.compile inlines a compiled function called from a compiled frame: the outer graph
    # (and the outer options) hold it, so op:exp is not probed there ...
    assert len(s.records("op:sigmoid")) == 1 and s.records("op:exp") == []
    # ... while a direct call goes through the inner function's own backend and options
    with dynstep.session() as s2:
        inner_fn(torch.randn(4))
    assert len(s2.records("op:exp")) == 1


@pytest.mark.parametrize("ctx", [torch.no_grad, torch.inference_mode])
def test_no_grad_and_inference_mode_with_grads_option(mlp, ctx):
    model, x = mlp
    cm = torch.compile(model, backend="superstep",
                       options={"inner": "aot_eager", "probe": ["module:fc1"], "grads": True})
    with dynstep.session() as s, ctx():
        cm(x)
    assert len(s.records("module:fc1", kind="value")) == 1
    assert s.records(kind="grad") == []


def test_tuple_outputs_are_probed_per_element():
    cf = compiled(lambda x: x.split(2, dim=0), probe=["op:split"], actions=["record"])
    with dynstep.session() as s:
        a, b = cf(torch.arange(4.0))
    snaps = s.records("op:split")
    assert [x.node for x in snaps] == ["split[0]", "split[1]"]
    assert torch.equal(snaps[1].tensor, b)


def test_unsupported_dtype_is_skipped_with_one_warning():
    cf = compiled(lambda x: (x * 2).abs(), probe=["op:mul", "op:abs"])
    z = torch.randn(3, dtype=torch.complex64)
    with dynstep.session() as s, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out1 = cf(z)
        cf(z)
    assert torch.equal(out1, (z * 2).abs())
    msgs = [str(w.message) for w in caught if "not supported" in str(w.message)]
    assert len(msgs) == 1 and "complex" in msgs[0]
    assert [x.target for x in s.records()] == ["Tensor.abs"] * 2  # the real-valued result is probed


def test_integer_bool_and_empty_tensors():
    cf = compiled(lambda x: ((x > 0).long(), x[:0] * 1), probe=["op:long", "op:mul"])
    with dynstep.session() as s:
        cf(torch.tensor([1.0, -2.0, 3.0]))
    long_snap, empty_snap = s.records("op:long")[0], s.records("op:mul")[0]
    assert long_snap.stats["max"] == 1 and long_snap.stats["count"] == 3
    assert empty_snap.stats["count"] == 0 and empty_snap.shape == (0,)


@pytest.mark.parametrize("inner", ["eager", "aot_eager"])
def test_nan_raise_names_the_origin(inner):
    def f(x):
        y = x * 2
        z = torch.log(y)   # the first NaN appears here
        return z + 1

    cf = compiled(f, inner=inner, nan="raise")
    with pytest.raises(dynstep.NonFiniteError) as info:
        cf(torch.tensor([1.0, -1.0]))
    err = info.value
    assert err.target == "torch.log" and err.nan == 1
    assert err.source.startswith("test_robustness.py:") and "torch.log(y)" in str(err)
    assert cf(torch.tensor([1.0, 2.0])).isfinite().all()


def test_nan_warn_mode_keeps_running():
    cf = compiled(lambda x: torch.sqrt(x), nan="warn")
    with pytest.warns(RuntimeWarning, match="NaN in the output of torch.sqrt"):
        out = cf(torch.tensor([-1.0]))
    assert out.isnan().all()
