"""The flight recorder on HF GPT-2 built from a config (random weights, nothing downloaded): a NaN planted
in a named module at step N is named with that module and its line, with the K steps before it."""

from __future__ import annotations

import warnings

import pytest
import torch

import dynstep

transformers = pytest.importorskip("transformers")
warnings.filterwarnings("ignore", module="transformers")
K = 3


def gpt2_training(dumps, *, steps: int, nan_at: int, inner: str = "aot_eager"):
    torch._dynamo.reset()
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=32, vocab_size=64,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).train()
    ids = torch.randint(0, 64, (2, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cm = torch.compile(model, backend="superstep", options={"inner": inner, "flight": {"steps": K, "path": str(dumps)}})
    for step in range(steps):
        if step == nan_at:   # a weight of the second block's MLP goes bad, as a hook could make it
            with torch.no_grad():
                model.transformer.h[1].mlp.c_fc.weight[0, 0] = float("nan")
        loss = cm(ids, labels=ids, use_cache=False).loss
        loss.backward()
        dynstep.flight.watch("loss", loss)
        opt.step()
        opt.zero_grad()


def test_a_nan_in_gpt2_is_named_with_its_module_line_and_lead_up(dumps):
    gpt2_training(dumps, steps=7, nan_at=5)
    (path,) = [p for p in dumps.iterdir() if p.is_dir()]
    rec = dynstep.load(path)
    t = rec.trigger
    assert (t.kind, t.step, t.phase) == ("nonfinite", 5, "forward")
    assert t.module == "transformer.h.1.mlp.c_fc" and t.source.startswith("pytorch_utils.py:")
    assert "addmm" in t.target and "NaN" in t.reason
    assert sorted({s.step for s in rec.all()}) == list(range(5 - K, 6))
    modules = {s.module for s in rec.all()}
    assert {"transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_proj", "lm_head"} <= modules
    assert {s.kind for s in rec.all()} == {"value", "grad"}
    clean = [s for s in rec.all() if s.step < 5]
    assert clean and not any(s.stats.nan for s in clean)
    (loss,) = rec.flight.watched
    assert loss.name == "loss" and loss.steps == (2, 3, 4, 5) and loss.values[-1] != loss.values[-1]   # NaN
