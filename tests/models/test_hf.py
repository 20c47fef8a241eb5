"""dynstep on models users have: HF transformers GPT-2 and Llama built from configs (random weights,
nothing downloaded), with KV caches on and off (issue 13).

Each selector kind against forward hooks, pause + set against eager with the same change, gradients
against backward hooks, and the diff naming a planted bug. Eager/aot_eager keep them quick.
"""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

import dynstep
from dynstep.core.events import Evaluated, Stopped, use_sink

transformers = pytest.importorskip("transformers")
warnings.filterwarnings("ignore", module="transformers")


def gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=32, vocab_size=64,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg).eval(), "transformer.h", torch.randint(0, 64, (2, 8))


def llama():
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=64, max_position_embeddings=32,
                                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval(), "model.layers", torch.randint(0, 64, (2, 8))


MODELS = {"gpt2": gpt2, "llama": llama}


def hooked(model, names, fn):
    """What forward hooks see on `names` during fn(): {name: [output per call]}."""
    seen = {n: [] for n in names}
    mods = dict(model.named_modules())
    handles = [mods[n].register_forward_hook(lambda m, i, o, n=n: seen[n].append(o)) for n in names]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()
    return seen


def logits(out):
    return out.logits if hasattr(out, "logits") else out[0]


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("name", MODELS)
def test_module_selector_gives_what_forward_hooks_see(name, use_cache):
    """Issue 13 defect 2: with a cache, `module:` also picked the cache's keys and values."""
    model, blocks, ids = MODELS[name]()
    layers = [f"{blocks}.{i}" for i in range(2)]
    seen = hooked(model, layers, lambda: model(ids, use_cache=use_cache))
    cm = torch.compile(model, backend="superstep",
                       options={"inner": "eager", "probe": [f"module:{blocks}.*"], "actions": ["record"]})
    with dynstep.session() as s, torch.no_grad():
        cm(ids, use_cache=use_cache)
    for layer in layers:
        (snap,) = s.records(f"module:{layer}")   # one value per returned tensor: the hidden states
        expected = seen[layer][0][0] if isinstance(seen[layer][0], tuple) else seen[layer][0]
        torch.testing.assert_close(snap.tensor, expected.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_op_in_and_line_selectors_on_a_real_model(name):
    model, blocks, ids = MODELS[name]()
    norm = "layer_norm" if name == "gpt2" else "rms_norm"
    cm = torch.compile(model, backend="superstep", options={
        "inner": "eager", "actions": ["record"],
        "probe": [f"in:{blocks}.0.mlp", f"op:{norm}" if name == "gpt2" else f"module:{blocks}.*.input_layernorm"]})
    with dynstep.session() as s, torch.no_grad():
        cm(ids, use_cache=False)
    inside = s.records(f"in:{blocks}.0.mlp")
    assert inside and all(r.module.startswith(f"{blocks}.0.mlp") for r in inside)
    mlp_out = hooked(model, [f"{blocks}.0.mlp"], lambda: model(ids, use_cache=False))[f"{blocks}.0.mlp"][0]
    torch.testing.assert_close(inside[-1].tensor, mlp_out.detach(), rtol=1e-5, atol=1e-6)
    normed = s.records(f"op:{norm}") if name == "gpt2" else s.records(f"module:{blocks}.*.input_layernorm")
    assert len(normed) == (5 if name == "gpt2" else 2)


def test_overlapping_op_and_line_selectors_probe_each_layer_norm_once():
    """Issue 13 defect 3: op:layer_norm + line:modeling_gpt2.py:<ln_1 line> gave 7 hits for 5 LayerNorms
    and 4 for the line's 2 executions."""
    from transformers.models.gpt2 import modeling_gpt2

    lines, start = inspect.getsourcelines(modeling_gpt2.GPT2Block.forward)
    line = start + next(i for i, text in enumerate(lines) if "hidden_states = self.ln_1(hidden_states)" in text)
    model, _, ids = gpt2()
    cm = torch.compile(model, backend="superstep", options={
        "inner": "eager", "probe": ["op:layer_norm", f"line:modeling_gpt2.py:{line}"]})
    with dynstep.session() as s, torch.no_grad():
        cm(ids)
    assert len(s.records("op:layer_norm")) == 5
    assert len(s.records(f"line:modeling_gpt2.py:{line}")) == 2
    assert len(s.records()) == 5


@pytest.mark.parametrize("use_cache", [True, False])
def test_pause_and_set_at_a_block_equals_eager_with_the_same_change(use_cache):
    """Issue 13 defect 2: `pause=module:transformer.h.1` stopped at the cache update first, so
    `set value = value * 0` zeroed the cache keys instead of the block's output."""
    model, blocks, ids = gpt2()
    with torch.no_grad():
        handle = model.transformer.h[1].register_forward_hook(lambda m, i, o: o * 0)
        expected = logits(model(ids, use_cache=use_cache))
        handle.remove()
    cm = torch.compile(model, backend="superstep", options={
        "inner": "aot_eager", "pause": [f"module:{blocks}.1"], "commands": "p value.shape; set value = value * 0; c"})
    events: list[object] = []
    with use_sink(events.append), torch.no_grad():
        out = logits(cm(ids, use_cache=use_cache))
    stops = [e for e in events if isinstance(e, Stopped)]
    assert len(stops) == 1 and stops[0].site.module == f"{blocks}.1"
    assert [e.text for e in events if isinstance(e, Evaluated)] == ["torch.Size([2, 8, 32])"]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_gradients_equal_backward_hooks(name):
    model, blocks, ids = MODELS[name]()     # eval(): no dropout, so eager and compiled see the same values
    mod = dict(model.named_modules())[f"{blocks}.1.mlp"]
    grads = []
    handle = mod.register_full_backward_hook(lambda m, gi, go: grads.append(go[0].detach().clone()))
    logits(model(ids, use_cache=False)).float().logsumexp(-1).mean().backward()
    handle.remove()
    model.zero_grad()
    cm = torch.compile(model, backend="superstep", options={
        "inner": "aot_eager", "probe": [f"module:{blocks}.1.mlp"], "actions": ["record"], "grads": True})
    with dynstep.session() as s:
        logits(cm(ids, use_cache=False)).float().logsumexp(-1).mean().backward()
    (grad,) = s.records(f"module:{blocks}.1.mlp", kind="grad")
    torch.testing.assert_close(grad.tensor, grads[0], rtol=1e-4, atol=1e-6)


def test_the_diff_names_a_planted_bug_in_gpt2():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eagerdiff"))
    import planted

    model, _, ids = gpt2()      # GPT-2's gelu_new is 0.5 * x * (1 + tanh(...)): plant sigmoid for its tanh
    bad = planted.swap_op("torch.tanh", "transformer.h.1.mlp.act", torch.sigmoid)
    with torch.no_grad():
        report = dynstep.diff(lambda i: logits(model(i, use_cache=False)), ids, backend=bad, ladder=False)
    first = report.first_divergence
    assert not report.ok and first is not None
    assert first.target == "torch.tanh" and first.module == "transformer.h.1.mlp.act"
    assert first.source.startswith("activations.py:") and "torch.tanh" in first.source_text
