"""dynstep.diff against deliberately wrong backends (tests/planted.py) and a clean Inductor run.

Every planted bug must be reported at the planted node: its source line and module path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynstep
from dynstep.front.demo.model import make
from dynstep.eagerdiff.judge import Tolerance, judge

sys.path.insert(0, os.path.dirname(__file__))
import planted  # noqa: E402

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache")

GELU, LINEAR, LN = "torch.nn.functional.gelu", "torch.nn.functional.linear", "torch.nn.functional.layer_norm"


class BadGeluGrad(torch.autograd.Function):
    """gelu forward with a ReLU-like backward: a bug only the gradients show."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.gelu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0).to(g.dtype)


def bad_gelu_grad(x):
    return BadGeluGrad.apply(x)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x, y):
        h = F.gelu(self.fc1(x))  # MLP_GELU_LINE
        return F.cross_entropy(self.fc2(h), y)


def _line(marker: str) -> str:
    with open(__file__) as f:
        for i, text in enumerate(f, 1):
            if marker in text and "_line(" not in text:
                return f"{os.path.basename(__file__)}:{i}"
    raise LookupError(marker)


def _mlp():
    torch.manual_seed(0)
    return MLP(), torch.randn(8, 16), torch.randint(0, 4, (8,))


PLANTS = [
    ("swap gelu->relu", planted.swap_op(GELU, "blocks.1.mlp", torch.relu), "blocks.1.mlp", "model.py:44"),
    ("perturb layer_norm", planted.perturb(LN, "blocks.0.ln2", 1e-3), "blocks.0.ln2", "model.py:58"),
    ("bf16 c_proj", planted.lower_precision(LINEAR, "blocks.0.attn.c_proj"), "blocks.0.attn.c_proj", "model.py:33"),
    ("perturb head (aot_eager)", planted.perturb(LINEAR, "head", 1e-3, inner="aot_eager"), "head", "model.py:76"),
]


@pytest.mark.parametrize("name,backend,module,source", PLANTS, ids=[p[0] for p in PLANTS])
def test_planted_bug_is_named_by_source_line_and_module(name, backend, module, source):
    model, idx = make()
    report = dynstep.diff(model, idx, backend=backend, ladder=False)
    assert not report.ok
    first = report.first_divergence
    assert first is not None, report.graphs[0].notes
    assert (first.module, first.source) == (module, source)
    assert first.own is True and first.diverged
    assert first.error > first.budget and first.source_text


def test_ladder_says_the_backend_under_test_introduces_it():
    model, idx = make()
    report = dynstep.diff(model, idx, backend=planted.swap_op(GELU, "blocks.0.mlp", torch.relu))
    rungs = {s.backend: s.diverged for s in report.graphs[0].ladder}
    assert rungs["aot_eager"] is False and rungs["aot_eager_decomp_partition"] is False
    assert rungs[planted.swap_op(GELU, "blocks.0.mlp", torch.relu).__name__] is True


def test_planted_nan_is_found_at_its_origin_not_downstream():
    model, idx = make()
    report = dynstep.diff(model, idx, backend=planted.plant_nan(LINEAR, "blocks.1.mlp.fc"), ladder=False)
    origin = report.graphs[0].nan_compiled
    assert origin is not None and origin.run == "compiled"
    assert (origin.module, origin.source, origin.nan) == ("blocks.1.mlp.fc", "model.py:44", 1)
    assert report.first_divergence.module == "blocks.1.mlp.fc"
    assert report.graphs[0].nan_eager is None


def test_nan_in_the_users_code_is_found_in_eager_too():
    def fn(x):
        y = x * 2
        z = torch.log(y - 1.0)  # NAN_LINE
        return z.relu() + 1

    report = dynstep.diff(fn, torch.linspace(0, 1, 8), backend="eager", ladder=False)
    g = report.graphs[0]
    assert report.ok  # eager and compiled agree, NaN included
    assert g.nan_eager is not None and g.nan_eager.source == _line("# NAN_LINE")
    assert g.nan_compiled is not None and g.nan_compiled.source == _line("# NAN_LINE")


def test_training_backward_only_bug_is_attributed_to_the_forward_line():
    model, x, y = _mlp()
    report = dynstep.diff(model, x, y, backend=planted.swap_op(GELU, "", bad_gelu_grad), training=True,
                          ladder=False)
    g = report.graphs[0]
    assert g.first_divergence is None  # the forward is right
    assert not report.ok and any(d.diverged for d in g.grads)
    assert g.grad_divergence is not None
    assert g.grad_divergence.source == _line("# MLP_GELU_LINE")
    assert g.grad_divergence.target == GELU


def test_training_forward_bug_names_the_forward_node():
    model, x, y = _mlp()
    report = dynstep.diff(model, x, y, backend=planted.perturb(LINEAR, "fc1", 0.1), training=True, ladder=False)
    assert report.first_divergence.module == "fc1"
    assert report.grad_divergence.module == "fc1"


def test_judge_is_the_fp64_reference_judgement():
    tol = Tolerance()
    x64 = torch.randn(1000, dtype=torch.float64)
    eager = x64.float()
    assert not judge(eager.clone(), eager, x64, tol).diverged
    assert judge((x64 + 1e-3).float(), eager, x64, tol).diverged
    bad = eager.clone()
    bad[3] = float("nan")
    m = judge(bad, eager, x64, tol)
    assert m.diverged and m.new_nonfinite == 1


def test_repro_script_rebuilds_the_node_and_shows_the_divergence(tmp_path):
    model, idx = make()
    report = dynstep.diff(model, idx, backend=planted.lower_precision(LINEAR, "blocks.0.attn.c_proj"),
                          ladder=False, repro=str(tmp_path))
    path = report.graphs[0].repro
    assert path and os.path.exists(tmp_path / "inputs.safetensors")
    run = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "DIVERGES" in run.stdout and "model.py:33" in open(path).read()


def test_json_and_html_outputs(tmp_path):
    model, idx = make()
    report = dynstep.diff(model, idx, backend=planted.swap_op(GELU, "blocks.1.mlp", torch.relu), ladder=False)
    data = json.loads(report.to_json(str(tmp_path / "d.json")))
    assert data["ok"] is False and data["first_divergence"]["source"] == "model.py:44"
    page = report.to_html(str(tmp_path / "d.html"))
    assert "h = F.gelu(self.fc(x))" in page and "blocks.1.mlp" in page
    assert "http" not in page.replace("<!doctype html>", "")  # self-contained: nothing to fetch
    assert "&amp;times;" not in page and "&amp;lt;" not in page  # nothing escaped twice
    assert "2\u00d716\u00d732" in page


def test_superstep_diff_option_warns_and_collects():
    from dynstep.eagerdiff import superstep_report

    model, idx = make()
    torch._dynamo.reset()
    bad = planted.swap_op(GELU, "blocks.1.mlp", torch.relu)
    cm = torch.compile(model, backend="superstep", options={"diff": True, "inner": bad})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cm(idx)
    torch._dynamo.reset()
    assert any("model.py:44" in str(w.message) for w in caught)
    assert superstep_report().first_divergence.module == "blocks.1.mlp"


@pytest.mark.slow
def test_clean_inductor_transformer_is_ok():
    model, idx = make()
    report = dynstep.diff(model, idx, backend="inductor")
    assert report.ok, report.summary()
    assert report.graphs[0].compiles == 1  # outputs only: nothing probed when nothing diverges


@pytest.mark.slow
def test_clean_inductor_mlp_training_step_is_ok():
    model, x, y = _mlp()
    report = dynstep.diff(model, x, y, backend="inductor", training=True)
    assert report.ok, report.summary()
    assert report.graphs[0].grads and not any(d.diverged for d in report.graphs[0].grads)


def test_dynamic_shapes_graph_is_diffed():
    def fn(x):
        y = torch.sin(x) * 2
        return F.gelu(y).sum(-1)  # DYN_LINE

    report = dynstep.diff(fn, torch.randn(5, 7), backend=planted.swap_op(GELU, "", torch.relu), dynamic=True,
                          ladder=False)
    assert report.first_divergence.source == _line("# DYN_LINE")


def test_a_backend_that_cannot_compile_is_a_clear_error():
    def broken(gm, example_inputs):
        raise RuntimeError("no kernel for you")

    with pytest.raises(Exception, match="failed to compile graph"):
        dynstep.diff(lambda x: x.sin() + 1, torch.randn(3), backend=broken, ladder=False)


@pytest.mark.slow
def test_inductor_relu_bug_is_found_with_its_kernel():
    import torch._inductor.config as inductor_config

    def fn(x, w):
        h = torch.tanh(x @ w)
        r = torch.relu(h * 3)  # RELU_LINE
        return (r @ w).sum(-1)

    torch.manual_seed(0)
    with inductor_config.patch({"cpp.inject_relu_bug_TESTING_ONLY": "accuracy"}):
        report = dynstep.diff(fn, torch.randn(8, 16), torch.randn(16, 16), backend="inductor", ladder=False)
    first = report.first_divergence
    assert first is not None and first.source == _line("# RELU_LINE") and first.target == "torch.relu"
    assert first.kernel.startswith("cpp_fused"), first


@pytest.mark.slow
def test_ladder_tells_inductor_from_the_mode_under_test():
    """With a mode= under test, Inductor in its default mode is a rung: here it already diverges,
    so the bug is Inductor's own, not the mode's (on CPU reduce-overhead has no CUDA graphs)."""
    import torch._inductor.config as inductor_config

    def fn(x, w):
        return torch.relu(torch.tanh(x @ w) * 3).sum(-1)

    torch.manual_seed(0)
    with inductor_config.patch({"cpp.inject_relu_bug_TESTING_ONLY": "accuracy"}):
        report = dynstep.diff(fn, torch.randn(8, 16), torch.randn(16, 16), backend="inductor",
                              mode="reduce-overhead")
    rungs = [(s.backend, s.diverged) for s in report.graphs[0].ladder]
    assert rungs == [("aot_eager", False), ("aot_eager_decomp_partition", False), ("inductor", True),
                     ("inductor (mode=reduce-overhead)", True)], rungs


def test_kernel_names_come_from_inductor_provenance_comments():
    from dynstep.eagerdiff.kernels import kernel_for

    triton = ("triton_poi_fused_gelu_0 = async_compile.triton('triton_poi_fused_gelu_0', '''...''')\n"
              "def call(args):\n"
              "        # Topologically Sorted Source Nodes: [linear_2, h], Original ATen: [aten.gelu]\n"
              "        triton_poi_fused_gelu_0.run(buf0, buf1, 4096, stream=stream0)\n"
              "        # Topologically Sorted Source Nodes: [h, linear_3], Original ATen: [aten.mm]\n"
              "        extern_kernels.mm(buf1, arg3_1, out=buf2)\n")
    assert kernel_for([triton], "h", "torch.nn.functional.gelu") == "triton_poi_fused_gelu_0"
    assert kernel_for([triton], "linear_3", "torch.nn.functional.linear") == "extern_kernels.mm"
    cpp = ("cpp_fused_mul_relu_tanh_0 = async_compile.cpp_pybinding(['float*'], r'''...''')\n"
           "cpp_fused_sum_1 = async_compile.cpp_pybinding(['float*'], r'''...''')\n")
    assert kernel_for([cpp], "r", "torch.relu") == "cpp_fused_mul_relu_tanh_0"
    assert kernel_for([cpp], "q", "torch.sin") == ""


def _run_python(code: str) -> subprocess.CompletedProcess:
    """`python -c code` in a fresh process that imports this checkout's dynstep."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def test_the_diff_engine_imports_neither_rich_nor_inductor():
    code = ("import sys, dynstep; dynstep.diff; import dynstep.eagerdiff.engine, dynstep.eagerdiff.training;"
            "print('rich' in sys.modules, 'torch._inductor.compile_fx' in sys.modules)")
    out = _run_python(code)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_a_diff_never_loads_the_native_probe_kernel():
    # dynstep.ops.native builds the native kernel on first load (about a minute, once per torch
    # version); the diff makes no probe-op calls, so it must not pay for that build.
    code = ("import sys, torch, dynstep; r = dynstep.diff(lambda x: x.sin() + 1, torch.randn(3), backend='eager',"
            " ladder=False); print(r.ok, 'dynstep.ops.native' in sys.modules)")
    out = _run_python(code)
    assert out.stdout.split() == ["True", "False"], out.stderr


CHAIN = 32


def _chain(x):
    for _ in range(CHAIN):
        x = torch.neg(x)  # CHAIN_LINE
    return x


@pytest.mark.parametrize("index", [0, 13, CHAIN - 1])
def test_kary_search_names_the_planted_op_in_fewer_compiles_than_bisection(index):
    from dynstep.eagerdiff import search

    report = dynstep.diff(_chain, torch.randn(64), backend=planted.perturb_nth(index), ladder=False)
    g = report.graphs[0]
    assert g.first_divergence is not None and g.first_divergence.order == index and g.first_divergence.own
    assert g.first_divergence.source == _line("# CHAIN_LINE")
    # outputs only, two rounds of three cuts (32 -> 8 -> 2 nodes), the last two nodes probed with
    # their inputs; bisection with a separate confirmation needs 1 + log2(32) + 1 = 7
    assert search.rounds(CHAIN) == 2 and g.compiles == 4


def test_cut_points_split_a_segment_evenly():
    from dynstep.eagerdiff import search

    assert search.cut_points(0, 8) == [2, 4, 6]
    assert search.cut_points(10, 15) == [11, 12, 13]
    assert search.cut_points(0, 2) == [1]
    assert [search.rounds(n) for n in (1, 4, 5, 16, 17, 64, 65)] == [0, 0, 1, 1, 2, 2, 3]


def _damped(x):
    a = torch.sin(x)  # DAMPED_ORIGIN
    b = a * 1e-4  # the planted error falls below the absolute floor here ...
    for _ in range(12):
        b = torch.neg(b)
    return b * 1e4  # ... and is back above it here: the cuts in between all look clean


def test_dense_scan_finds_the_origin_when_the_search_is_misled():
    report = dynstep.diff(_damped, torch.randn(256), backend=planted.perturb("torch.sin", "", 1e-3),
                          ladder=False)
    g = report.graphs[0]
    assert g.first_divergence is not None and g.first_divergence.source == _line("# DAMPED_ORIGIN")
    assert any("dense scan found" in n for n in g.notes), g.notes
    assert g.compiles == 4  # outputs, one round, the final segment, the dense scan


def test_a_divergence_that_vanishes_once_probed_is_fusion_dependent():
    report = dynstep.diff(_chain, torch.randn(64), backend=planted.perturb_unprobed(), ladder=False)
    g = report.graphs[0]
    assert not report.ok and g.first_divergence is None and g.fusion_dependent
    assert any("fusion-dependent" in n for n in g.notes), g.notes
