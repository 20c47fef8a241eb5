"""HF GPT-2 on CUDA under `mode="reduce-overhead"` (issue 13, defects 1 and 4).

Defect 1: `nan` checks under CUDA graphs used to kill the process with SIGSEGV while Inductor's
CUDA graph trees recorded. Now a check that cannot enter Python during capture is flagged on the
device and reported after the replay, naming the first non-finite node of that replay, with the
message a check outside capture gives. Each run is a subprocess, so a crash is a failed test, not
a dead test session.

Defect 4: pause + `set value = value * 0` at a block under reduce-overhead equals eager with a
forward hook making the same change, on the first call and on a replayed one.

Skipped without CUDA or transformers. Results on a GPU: docs/gpu-validation.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
transformers = pytest.importorskip("transformers")

GPT2 = textwrap.dedent("""
    import warnings, torch, transformers, dynstep
    warnings.simplefilter("ignore")
    cfg = transformers.GPT2Config(n_layer=3, n_embd=64, n_head=4, n_positions=64, vocab_size=128,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).cuda().eval()
    ids = torch.randint(0, 128, (2, 16), device="cuda")
""")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", GPT2 + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.mark.parametrize("mode", ["raise", "warn"])
def test_nan_checks_under_reduce_overhead_do_not_crash_and_name_the_first_node(mode):
    run = _run(f"""
        cm = torch.compile(model, backend="superstep",
                           options={{"inner": "inductor", "mode": "reduce-overhead", "nan": "{mode}"}})
        with torch.no_grad():
            for _ in range(3):
                cm(ids)                                   # finite: no report
        print("clean calls ok", flush=True)
        model.transformer.h[1].mlp.c_fc.weight.data[0, 0] = float("nan")   # a NaN enters at block 1's MLP
        caught = None
        with warnings.catch_warnings(record=True) as seen, torch.no_grad():
            warnings.simplefilter("always")
            try:
                cm(ids)
            except dynstep.NonFiniteError as exc:
                caught = exc
        if caught is not None:
            print("raised", caught.node, caught.module, "|", caught)
        for w in seen:
            if "NaN" in str(w.message):
                print("warned", w.message)
    """)
    assert run.returncode == 0, run.stderr[-3000:]           # no SIGSEGV (-11)
    assert "clean calls ok" in run.stdout
    report = next(line for line in run.stdout.splitlines() if line.startswith(("raised", "warned")))
    assert report.startswith("raised" if mode == "raise" else "warned")
    assert "transformer.h.1.mlp" in report and "NaN in the output of" in report


def test_pause_and_set_under_reduce_overhead_equals_eager_on_first_and_replayed_calls():
    run = _run("""
        hook = model.transformer.h[1].mlp.register_forward_hook(lambda m, i, o: o * 0)
        with torch.no_grad():
            expected = model(ids).logits
        hook.remove()
        cm = torch.compile(model, backend="superstep", options={
            "inner": "inductor", "mode": "reduce-overhead", "pause": ["module:transformer.h.1.mlp"],
            "commands": "set value = value * 0; c; set value = value * 0; c; set value = value * 0; c"})
        with torch.no_grad():
            outs = [cm(ids).logits.clone() for _ in range(3)]
        for i, out in enumerate(outs):
            print("call", i, "max diff", (out - expected).abs().max().item())
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    diffs = [float(line.rsplit(" ", 1)[1]) for line in run.stdout.splitlines() if line.startswith("call")]
    assert len(diffs) == 3 and max(diffs) < 1e-3, run.stdout
