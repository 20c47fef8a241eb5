"""TensorProbe and its actions, on CPU, through whichever kernel is registered (native or Python),
and the Python kernel called directly for parity of the sticky checks."""

from __future__ import annotations

import math

import pytest
import torch

import dynstep
from dynstep.probe import runtime
from dynstep.core.errors import CheckFailed
from dynstep.core.events import ProbePrinted, use_sink
from dynstep.probe.api import (CheckAction, CudaGraphTensorProbe, PrintAction, RecordAction, TensorCompare,
                               TensorPrint, TensorProbe, TensorRecord, drain_records)


def test_returns_input_object_unchanged():
    with TensorProbe("p", [RecordAction(2)], when="always") as p:
        x = torch.randn(3)
        assert p(x) is x


def test_capture_mode_is_a_no_op_on_cpu():
    with TensorProbe("cap", [RecordAction(4), CheckAction(torch.zeros(3))]) as p:
        p(torch.ones(3))
        assert p.records() == [] and p.state().calls == 0
        p.assert_ok()  # nothing ran, nothing failed


def test_record_ring_keeps_last_capacity_and_counts_drops():
    with TensorProbe("rec", [RecordAction(capacity=2)], when="always") as p:
        for i in range(5):
            p(torch.full((2, 2), float(i)))
        recs = p.records()
        assert [r.replay_index for r in recs] == [3, 4]
        assert [r.probe_name for r in recs] == ["rec", "rec"]
        assert torch.equal(recs[-1].tensor, torch.full((2, 2), 4.0))
        assert p.snapshot() is recs[-1]
        st = p.state()
        assert (st.calls, st.held, st.dropped) == (5, 2, 3)


def test_records_are_copies():
    with TensorProbe("copy", [RecordAction(1)], when="always") as p:
        x = torch.zeros(4)
        p(x)
        x += 1
        assert torch.equal(p.records()[0].tensor, torch.zeros(4))


def test_print_every_and_max_items():
    events: list[ProbePrinted] = []
    with use_sink(events.append), TensorProbe("pr", [PrintAction(max_items=3, every=2)], when="always") as p:
        for _ in range(5):
            p(torch.arange(10.0))
    assert [e.snapshot.call for e in events] == [0, 2, 4]
    assert events[0].values == (0.0, 1.0, 2.0)
    assert p.records() == []  # printing does not record


@pytest.mark.parametrize("path", ["op", "python"])
def test_check_mismatch_is_sticky_with_same_message(path):
    expected = torch.tensor([1.0, 2.0, 3.0])
    p = TensorProbe(f"chk-{path}", [CheckAction(expected, rtol=0, atol=0.1)], when="always")
    call = (lambda x: p(x)) if path == "op" else (lambda x: runtime.on_probe(x, p._site_id))
    call(expected.clone())
    p.assert_ok()
    call(torch.tensor([1.0, 2.5, math.nan]))
    call(expected.clone())  # later good values do not clear the failure
    with pytest.raises(CheckFailed) as info:
        p.assert_ok()
    assert str(info.value) == (f"TensorProbe 'chk-{path}': call 1: 2 of 3 values differ beyond rtol=0, atol=0.1 "
                               "(max abs diff 0.5; first at flat index 1: got 2.5, expected 2)")
    p.reset()
    p.assert_ok()
    p.close()


@pytest.mark.parametrize("path", ["op", "python"])
def test_check_shape_dtype_and_equal_nan(path):
    def run(probe, x):
        return probe(x) if path == "op" else runtime.on_probe(x, probe._site_id)

    with TensorProbe("shape", [CheckAction(torch.zeros(2, 2))], when="always") as p:
        run(p, torch.zeros(4))
        with pytest.raises(CheckFailed, match=r"shape \(4,\) does not match the expected shape \(2, 2\)"):
            p.assert_ok()
    with TensorProbe("dtype", [CheckAction(torch.zeros(2, dtype=torch.float64))], when="always") as p:
        run(p, torch.zeros(2))
        with pytest.raises(CheckFailed, match="dtype float32 does not match the expected dtype float64"):
            p.assert_ok()
    nan = torch.tensor([math.nan, 1.0])
    with TensorProbe("eqnan", [CheckAction(nan, equal_nan=True)], when="always") as p:
        run(p, nan.clone())
        p.assert_ok()


@pytest.mark.parametrize("path", ["op", "python"])
def test_finite_check_without_expected(path):
    with TensorProbe("fin", [CheckAction()], when="always") as p:
        x = torch.tensor([1.0, math.inf, math.nan])
        p(x) if path == "op" else runtime.on_probe(x, p._site_id)
        with pytest.raises(CheckFailed, match="call 0: 1 NaN, 1 Inf"):
            p.assert_ok()


def test_non_contiguous_policies():
    x = torch.arange(12.0).reshape(3, 4).t()
    with TensorProbe("nc", [RecordAction()], when="always") as p:
        with pytest.raises(ValueError, match=r"not contiguous; pass non_contiguous=\"copy\""):
            p(x)
    with TensorProbe("nc-copy", [RecordAction()], when="always", non_contiguous="copy") as p:
        assert p(x) is x
        assert torch.equal(p.records()[0].tensor, x)


def test_close_twice_and_after_close_nothing_runs():
    p = TensorProbe("closing", [RecordAction(4)], when="always")
    p(torch.ones(1))
    p.close()
    p.close()
    assert p.closed
    x = torch.ones(1)
    assert p(x) is x
    assert len(p.records()) == 1  # what was recorded before close stays readable


def test_drain_records_consumes_then_clears():
    with TensorProbe("drain", [RecordAction(8)], when="always") as p:
        for i in range(3):
            p(torch.tensor([float(i)]))
        seen = []
        assert drain_records(p, lambda s: seen.append(float(s.tensor))) == 3
        assert seen == [0.0, 1.0, 2.0] and p.records() == []

        def boom(_s):
            raise RuntimeError("consumer failed")

        p(torch.tensor([9.0]))
        with pytest.raises(RuntimeError):
            drain_records(p, boom)
        assert len(p.records()) == 1  # not cleared when the consumer fails


def test_watch_grad_probes_the_gradient():
    with TensorProbe("grad", [RecordAction(2)], when="always") as p:
        w = torch.randn(3, requires_grad=True)
        assert p.watch_grad(w) is w
        (w * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        assert torch.equal(p.records()[0].tensor, torch.tensor([1.0, 2.0, 3.0]))
        _, handle = p.attach_grad(torch.ones(1, requires_grad=True), return_handle=True)
        handle.remove()
        with pytest.raises(ValueError, match="does not require grad"):
            p.watch_grad(torch.ones(1))


def test_inside_torch_compile_fullgraph_inductor():
    p = TensorProbe("compiled", [RecordAction(4)], when="always")

    @torch.compile(backend="inductor", fullgraph=True)  # fails on any graph break
    def f(x):
        h = p(x.sin())
        return h.cos()

    x = torch.randn(5)
    torch.testing.assert_close(f(x), x.sin().cos())
    f(x)
    recs = p.records()
    assert [r.call for r in recs] == [0, 1]
    torch.testing.assert_close(recs[0].tensor, x.sin())
    p.close()


def test_disabled_actions_make_a_pure_no_op():
    p = TensorProbe("off", [RecordAction(enabled=False)], when="always")
    p(torch.ones(2))
    assert p._site_id is None and p.records() == [] and p.state().calls == 0


def test_argument_errors_say_what_is_expected():
    with pytest.raises(ValueError, match="when='sometimes'; expected 'capture' or 'always'"):
        TensorProbe("x", [], when="sometimes")
    with pytest.raises(ValueError, match="two RecordActions"):
        TensorProbe("x", [RecordAction(), RecordAction()])
    with pytest.raises(TypeError, match="is not an action"):
        TensorProbe("x", ["record"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="capacity=0"):
        TensorProbe("x", [RecordAction(capacity=0)])


def test_torch_cudagraph_debug_names():
    assert (TensorPrint, TensorRecord, TensorCompare) == (PrintAction, RecordAction, CheckAction)
    assert dynstep.CudaGraphTensorProbe is CudaGraphTensorProbe and dynstep.TensorProbe is TensorProbe
    with CudaGraphTensorProbe("compat", [TensorRecord(capacity=2)], mode="always") as p:
        p(torch.ones(2))
        assert p.when == "always" and len(p.records()) == 1


def test_probe_hits_do_not_reach_sessions():
    with dynstep.session() as s, TensorProbe("own", [RecordAction()], when="always") as p:
        p(torch.ones(2))
        assert len(p.records()) == 1
    assert len(s.records()) == 0


def test_a_check_that_could_not_run_does_not_pass():
    """Issue 14 item 9: a CheckAction on a complex tensor was skipped and assert_ok() passed."""
    p = TensorProbe("c", [CheckAction()], when="always")
    with pytest.warns(RuntimeWarning, match="complex dtype"):
        p(torch.randn(3, dtype=torch.complex64))
    assert not p.state().ok and "not checked" in p.state().message
    with pytest.raises(CheckFailed, match="not checked: a complex dtype torch.complex64 is not supported"):
        p.assert_ok()


def test_a_nested_tensor_is_skipped_with_a_warning_not_an_error():
    """Issue 14 item 14: TensorProbe on a nested tensor raised NotImplementedError (AutogradNestedTensor)."""
    nt = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    p = TensorProbe("n", [RecordAction()], when="always")
    with pytest.warns(RuntimeWarning, match="nested tensor"):
        assert p(nt) is nt
    assert p.records() == []


@pytest.mark.parametrize("in_dims", [0, 1])
def test_a_probe_under_vmap_records_the_whole_batch(in_dims):
    """Issue 14 item 14: "Batching rule not implemented for dynstep::probe" under torch.vmap."""
    p = TensorProbe("v", [RecordAction(capacity=4)], when="always")
    x = torch.randn(3, 4)
    out = torch.vmap(lambda t: p(t) * 2, in_dims=in_dims)(x)
    assert torch.equal(out, (x if in_dims == 0 else x.T) * 2)
    (snap,) = p.records()
    assert torch.equal(snap.tensor, x if in_dims == 0 else x.T)
