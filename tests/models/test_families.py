"""Every architecture family users run, from tiny configs (tests/models/families.py), each check against
eager PyTorch (issue 25): decoder LMs with decorated forwards (Llama, Mistral, Qwen2), an MoE (Mixtral),
an encoder (BERT), encoder-decoders (T5, BART), a vision transformer (ViT), a conv net with BatchNorm
(ResNet); KV caches on and off where they apply.

Per family: no options -> the inner compiler's own output; `module:**` records equal forward hooks (count
and values); pause + `set` equals eager with a hook making the same change; `grads=True` equals backward
hooks; a planted bug is named by its module; the first NaN is named by its module. aot_eager keeps it
quick; Inductor runs the records and transparency checks of Llama, BERT and Mixtral (pauses under
Inductor: tests/step/).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

import dynstep
from dynstep.core.events import Stopped
from dynstep.core.errors import NonFiniteError

from .families import FAMILIES, output

warnings.filterwarnings("ignore", module="transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eagerdiff"))
import planted  # noqa: E402

CASES = [(n, uc) for n, f in FAMILIES.items() for uc in ((False, True) if f.cache else (None,))]
IDS = [f"{n}-cache" if uc else n for n, uc in CASES]


def forward_hooks(model: torch.nn.Module, inputs: dict) -> dict[str, list[torch.Tensor]]:
    """What forward hooks see: every module's tensor outputs, per call, in call order. A module that
    returns its input as it is (nn.Identity, ResNet's shortcut) computes nothing a graph could hold."""
    seen: dict[str, list[torch.Tensor]] = {}
    handles = []

    def keep(name: str):
        def hook(module, args, out):
            if isinstance(out, torch.Tensor) and not any(out is a for a in args):
                seen.setdefault(name, []).append(out.detach().clone())
        return hook

    for name, mod in model.named_modules():
        if name:
            handles.append(mod.register_forward_hook(keep(name)))
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for h in handles:
            h.remove()
    return seen


def compiled(model, inner: str, **options):
    return torch.compile(model, backend="superstep", options={"inner": inner, **options})


@pytest.mark.parametrize("name, use_cache", [(n, False if f.cache else None) for n, f in FAMILIES.items()],
                         ids=list(FAMILIES))
def test_no_options_gives_the_inner_compilers_output(name, use_cache):
    fam = FAMILIES[name]
    model, inputs = fam.build(use_cache)
    with torch.no_grad():
        plain = output(torch.compile(model, backend=fam.inner)(**inputs))
        torch._dynamo.reset()
        ours = output(compiled(model, fam.inner)(**inputs))
    assert torch.equal(ours, plain)


@pytest.mark.parametrize("name, use_cache", CASES, ids=IDS)
def test_module_records_equal_forward_hooks(name, use_cache):
    fam = FAMILIES[name]
    model, inputs = fam.build(use_cache)
    want = forward_hooks(model, inputs)
    cm = compiled(model, fam.inner, probe=["module:**"], actions=["record"])
    with dynstep.session() as s, torch.no_grad():
        cm(**inputs)
    missing = []
    for module, values in want.items():
        got = sorted(s.records(f"module:{module}"), key=lambda r: r.seq)
        got = [r for r in got if module in r.modules]
        if not got and all(v.numel() == 0 for v in values):
            continue
        if len(got) != len(values):
            missing.append((module, len(got), len(values)))
            continue
        for snap, value in zip(got, values):
            torch.testing.assert_close(snap.tensor, value, rtol=1e-4, atol=1e-4, msg=lambda m: f"{module}: {m}")
    assert not missing, missing


@pytest.mark.parametrize("name, use_cache", CASES, ids=IDS)
def test_pause_and_set_equal_eager_with_the_same_change(name, use_cache, events):
    fam = FAMILIES[name]
    model, inputs = fam.build(use_cache)
    block = dict(model.named_modules())[fam.block]
    with torch.no_grad():    # zeroed: the norms after a block would undo a scale (RMSNorm) or a shift (LayerNorm)
        plain = output(model(**inputs))
        handle = block.register_forward_hook(
            lambda m, i, o: o * 0 if isinstance(o, torch.Tensor) else (o[0] * 0,) + tuple(o[1:]))
        expected = output(model(**inputs))
        handle.remove()
    cm = compiled(model, "aot_eager", pause=[f"module:{fam.block}"], commands="set value = value * 0; c")
    with torch.no_grad():
        out = output(cm(**inputs))
    stops = [e for e in events if isinstance(e, Stopped)]
    assert len(stops) == 1 and fam.block in stops[0].site.modules
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert (out - plain).abs().max() > 1e-4


@pytest.mark.parametrize("name", list(FAMILIES))
def test_gradients_equal_backward_hooks(name):
    fam = FAMILIES[name]
    model, inputs = fam.build(False if fam.cache else None)
    block = dict(model.named_modules())[fam.block]
    grads = []

    def keep(module, grad_in, grad_out):
        grads.append(grad_out[0].detach().clone())

    handle = block.register_full_backward_hook(keep)
    output(model(**inputs)).float().square().mean().backward()
    handle.remove()
    model.zero_grad()
    cm = compiled(model, "aot_eager", probe=[f"module:{fam.block}"], actions=["record"], grads=True)
    with dynstep.session() as s:
        output(cm(**inputs)).float().square().mean().backward()
    got = [r for r in s.records(f"module:{fam.block}", kind="grad") if fam.block in r.modules]
    assert len(got) == 1, [r.module for r in s.records(kind="grad")]
    torch.testing.assert_close(got[0].tensor, grads[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_diff_names_a_planted_bug_by_its_module(name):
    fam = FAMILIES[name]
    model, inputs = fam.build(False if fam.cache else None)
    op, module, *swap = fam.plant
    bad = planted.swap_op(op, module, swap[0]) if swap else planted.scale(op, module, 1.01)
    with torch.no_grad():
        report = dynstep.diff(lambda kw: output(model(**kw)), inputs, backend=bad, ladder=False)
    first = report.first_divergence
    assert not report.ok and first is not None, report
    assert (first.module, first.target) == (module, op)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_first_nan_is_named_by_its_module(name):
    fam = FAMILIES[name]
    model, inputs = fam.build(False if fam.cache else None)
    with torch.no_grad():
        dict(model.named_modules())[fam.poison].weight.view(-1)[0] = float("nan")
    cm = compiled(model, "aot_eager", nan="raise")
    with pytest.raises(NonFiniteError) as caught, torch.no_grad():
        cm(**inputs)
    assert f"module {fam.poison}" in str(caught.value), str(caught.value)
