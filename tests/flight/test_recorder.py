"""The flight recorder on real torch.compile training runs (TinyGPT and a small regression MLP): what a
dump names, what it holds, when nothing is written, and that its probes change no number."""

from __future__ import annotations

import os

import pytest
import torch

import dynstep
from dynstep.core.errors import OptionsError
from dynstep.front.demo.model import make

from .loops import regression, tiny

K = 4


def only_dump(path):
    found = sorted(p for p in path.iterdir() if p.is_dir())
    assert len(found) == 1, found
    return dynstep.load(found[0])


@pytest.mark.parametrize("inner", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_a_nan_planted_at_step_n_is_named_with_its_step_module_and_line(dumps, inner):
    tiny(steps=9, nan_at=6, inner=inner, flight={"steps": K, "path": str(dumps)})
    rec = only_dump(dumps)
    t = rec.trigger
    assert (t.kind, t.step, t.phase, t.graph) == ("nonfinite", 6, "forward", "forward[0/0]")
    assert t.module == "blocks.1.mlp.fc" and t.source == "model.py:44" and t.node.startswith("linear")
    assert t.source_text == "h = F.gelu(self.fc(x))" and "NaN" in t.reason
    assert rec.flight.first_step == 6 - K and rec.flight.last_step == 6 and rec.flight.step_rule == "optimizer"
    steps = sorted({s.step for s in rec.all()})
    assert steps == list(range(6 - K, 7))                                    # K steps before it, and its own
    values = {(s.graph, s.node) for s in rec.all() if s.kind == "value"}
    grads = {(s.graph, s.node) for s in rec.all() if s.kind == "grad"}
    assert len(values) > 50 and grads and grads <= values                    # every node, gradients beside
    per_step = [sum(1 for s in rec.all() if s.step == k) for k in steps]
    assert len(set(per_step)) == 1                                            # each step holds every site once
    bad = [s for s in rec.all() if s.stats.nan]
    assert min(bad, key=lambda s: s.seq).node == t.node and all(s.step == 6 for s in bad)


def test_an_inf_in_a_data_batch_is_named_at_the_first_layer(dumps):
    regression(steps=7, inf_at=5, flight={"steps": K, "path": str(dumps)})
    t = only_dump(dumps).trigger
    assert (t.kind, t.step, t.module, t.phase) == ("nonfinite", 5, "fc1", "forward")
    assert t.source.startswith("loops.py:") and "Inf" in t.reason


def test_with_no_trigger_nothing_is_written(dumps):
    tiny(steps=6, flight={"steps": K, "path": str(dumps)})
    recorder = dynstep.flight.current()
    assert recorder.dumps == [] and recorder.pending is None
    recorder.at_exit()                                                        # what atexit runs
    assert not os.path.exists(dumps)


def test_an_attention_mask_filled_with_inf_is_not_a_trigger(dumps):
    """TinyGPT's attention fills its mask with -inf on every call: by design, from the first call on."""
    tiny(steps=3, flight={"steps": K, "path": str(dumps)})
    assert not os.path.exists(dumps)


def test_a_loss_spike_rule_fires_and_names_the_first_node_that_jumped(dumps):
    _, losses = tiny(steps=10, spike_at=7, flight={"steps": 6, "on": ["nonfinite", "spike:loss"], "path": str(dumps)})
    assert losses[7] > 5 * losses[6]
    rec = only_dump(dumps)
    t = rec.trigger
    assert (t.kind, t.step, t.name, t.value) == ("spike", 7, "loss", pytest.approx(losses[7]))
    assert t.module == "head" and t.source == "model.py:76" and t.phase == "forward"
    (watched,) = rec.flight.watched
    assert watched.name == "loss" and watched.steps[-1] == 7 and watched.values[-1] == pytest.approx(losses[7])


def test_an_exception_leaving_a_compiled_call_dumps_its_step(dumps):
    with pytest.raises(Exception, match="index out of range"):
        tiny(steps=8, bad_token_at=5, flight={"steps": K, "path": str(dumps)})
    t = only_dump(dumps).trigger
    assert t.kind == "exception" and t.step == 5 and "index out of range" in t.reason


def test_a_manual_dump_and_a_step_per_compiled_call_without_an_optimizer(dumps):
    torch._dynamo.reset()
    model, idx = make(seed=0, layers=1)
    cm = torch.compile(model, backend="superstep", options={"inner": "aot_eager", "flight": {"path": str(dumps)}})
    with torch.no_grad():
        for _ in range(5):
            cm(idx)
    path = dynstep.flight.dump()
    rec = dynstep.load(path)
    assert rec.trigger.kind == "manual" and rec.trigger.step == 4 and rec.flight.step_rule == "call"
    assert sorted({s.step for s in rec.all()}) == [0, 1, 2, 3, 4]
    assert {s.kind for s in rec.all()} == {"value"}                       # no backward ran


def test_gradient_accumulation_keeps_k_steps_of_every_micro_batch(dumps):
    tiny(steps=8, nan_at=7, accumulate=3, flight={"steps": K, "path": str(dumps)})
    rec = only_dump(dumps)
    assert rec.trigger.step == 7
    site = rec.all()[0].site
    calls = sorted(s.call for s in rec.all() if s.site == site)
    assert calls == list(range(3 * (7 - K), 3 * 7 + 3))                   # K + 1 steps x 3 calls, none lost


@pytest.mark.parametrize("inner", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_flight_probes_never_change_outputs_or_gradients(inner, dumps):
    plain, plain_losses = tiny(steps=3, compile_kwargs={"backend": inner})
    flown, flown_losses = tiny(steps=3, inner=inner, flight={"steps": K, "path": str(dumps)})
    assert plain_losses == flown_losses
    for (name, a), b in zip(plain.named_parameters(), flown.parameters()):
        assert torch.equal(a, b), name                                     # bitwise, after 3 optimizer steps


@pytest.mark.parametrize("bad, match", [
    ({"steps": 0}, "'steps'"), ({"on": ["nonfinite", "bogus"]}, "unknown trigger rule 'bogus'"),
    ({"on": ["spike:"]}, "spike:NAME"), ({"on": ["spike:loss:1"]}, "FACTOR > 1"), ({"color": 1}, "unknown key"),
    ({"inputs": "lots"}, "'inputs'"), ("yes", "must be True, False or a mapping"), ({"select": []}, "'select'")])
def test_bad_flight_options_say_what_was_expected(bad, match):
    with pytest.raises(OptionsError, match=match):
        dynstep.superstep(flight=bad)


def test_a_bad_flight_selector_and_an_aten_selector_are_refused():
    with pytest.raises(ValueError, match="flight"):
        dynstep.superstep(flight={"select": ["modul:x"]})
    model, idx = make(seed=0, layers=1)
    cm = torch.compile(model, backend="superstep", options={"inner": "aot_eager", "flight": {"select": ["op:aten.mm"]}})
    with pytest.raises(OptionsError, match="AOTAutograd"):
        cm(idx)


def test_the_flight_beside_a_users_probes_both_see_the_same_gradient(dumps):
    """Two passes tap the same value's gradient: the second tap chains after the first, or it would
    have no user and its gradient no probe."""
    model, idx = make(seed=0, layers=1)
    cm = torch.compile(model, backend="superstep", options={
        "inner": "aot_eager", "probe": ["module:blocks.*.mlp"], "grads": True, "flight": {"path": str(dumps)}})
    with dynstep.session() as s:
        cm(idx).logsumexp(-1).mean().backward()
    mine = {x.kind: x for x in s.records("module:blocks.0.mlp")}
    assert set(mine) == {"value", "grad"}
    flown = {x.kind: x for x in dynstep.load(dynstep.flight.dump()).all() if x.node == mine["value"].node}
    assert set(flown) == {"value", "grad"}
    for kind in ("value", "grad"):
        assert flown[kind].stats == mine[kind].stats


def test_a_signal_that_lands_in_a_dynamo_guard_check_is_taken_again_outside_it(dumps):
    """Dynamo's C++ guard check clears any exception a Python guard function raises (LAMBDA_GUARD): a SIGINT
    handled there would dump and then lose its KeyboardInterrupt, and the program would train on (seen about
    once in 200 signals sent at random moments of a training loop). The handler leaves such a signal for a
    moment later."""
    import signal
    import sys
    import time

    import torch._dynamo.guards as guards

    from dynstep import _compat

    before = signal.signal(signal.SIGINT, signal.default_int_handler)   # pytest may run with SIGINT ignored
    scope: dict = {"sys": sys}
    exec(compile("frame = sys._getframe()", guards.__file__, "exec"), scope)    # a frame as a guard function's
    assert _compat.in_dynamo_guard(scope["frame"]) and not _compat.in_dynamo_guard(sys._getframe())
    try:
        tiny(steps=2, flight={"steps": K, "path": str(dumps)})
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler) and handler is not signal.default_int_handler
        try:
            handler(signal.SIGINT, scope["frame"])        # inside the guard check: nothing yet
        except KeyboardInterrupt:
            pytest.fail("KeyboardInterrupt raised inside a Dynamo guard check, which drops it")
        assert not dumps.exists() or not any(dumps.iterdir())
        with pytest.raises(KeyboardInterrupt):
            time.sleep(10)                                 # ... the signal again, here: the dump, then the interrupt
    finally:
        dynstep.flight.stop()
        signal.signal(signal.SIGINT, before)
    assert only_dump(dumps).trigger.kind == "signal"


def test_on_a_device_each_step_is_settled_before_the_next_one_starts(dumps, monkeypatch):
    """On CUDA the device publishes a step's statistics and the recorder harvests them at the step's end
    (docs/flight.md, CUDA). Here the device is simulated on the CPU: the wait and the harvest must come
    before the clock moves on (so the harvested hits take order numbers inside their own step), once per
    step, and only a harvest that saw a new NaN/Inf moves hits to Python."""
    from dynstep.probe import rings

    waits, drains = [], []
    nonfinite = {"count": 0}

    def on_step(step, loss):
        rec = dynstep.flight.current()
        rec.cuda = True                       # as if the graphs' inputs had been CUDA tensors
        if step == 2:
            nonfinite["count"] = 3            # the device saw NaN/Inf in the next step

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: waits.append(dynstep.flight.current().clock.step))
    monkeypatch.setattr(rings, "harvest_device", lambda: (0, nonfinite["count"]))
    real_drain = rings.drain_native
    monkeypatch.setattr(rings, "drain_native", lambda *a: drains.append(dynstep.flight.current().clock.step)
                        or real_drain(*a))
    tiny(steps=6, flight={"steps": K, "path": str(dumps)}, log=on_step)
    assert waits == [1, 2, 3, 4, 5]           # at each optimizer step, before its step ended
    assert drains == [3]                      # the harvest that saw the new count, within step 3
    assert not dumps.exists()                 # a count that moved is no trigger by itself: the hits decide


def test_a_nan_reaching_the_recorder_only_through_a_drain_is_the_trigger(dumps):
    """On CUDA a step's hits reach Python by the native rings' drain (settle_device), which hands them over
    without a Snapshot (probe.runtime.RawAdd): a NaN among them must still become the trigger, named."""
    from dynstep.probe import runtime

    tiny(steps=3, flight={"steps": K, "path": str(dumps)})
    recorder = dynstep.flight.current()
    ring = next(r for r in recorder.rings.values() if r.site.module == "blocks.1.mlp.fc" and r.site.kind == "value")
    add = runtime.RUNTIME.raw_adds[ring.site.id]
    add(runtime.next_seq(), 7, (0.0, 1.0, 0.5, 0.5, 1.0, 3, 0, 61), [64], "float32", "cpu")
    assert recorder.pending is not None
    assert (recorder.pending.kind, recorder.pending.node, recorder.pending.module) == \
        ("nonfinite", ring.site.node, "blocks.1.mlp.fc")
    assert ring.hits[-1].nan == 3 and ring.hits[-1].shape == (64,)
    path = recorder._write(recorder.pending)
    assert dynstep.load(path).trigger.node == ring.site.node
