"""The pytest plugin, through pytester in a subprocess, on a deliberately wrong Inductor: torch's
``cpp.inject_relu_bug_TESTING_ONLY = "accuracy"`` makes Inductor's C++ code compute relu(x) as x + 1."""

from __future__ import annotations

import os
import subprocess
import sys

pytest_plugins = ["pytester"]

USER_TESTS = '''
import pytest, torch
import torch._inductor.config as inductor_config


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        return torch.relu(h) * 2


@pytest.fixture
def relu_bug():
    with inductor_config.patch({"cpp.inject_relu_bug_TESTING_ONLY": "accuracy"}):
        yield


@pytest.mark.dynstep
def test_marked_on_the_buggy_inductor(relu_bug):
    model = torch.compile(Tiny().eval())
    assert model(torch.randn(4, 8)).shape == (4, 8)


@pytest.mark.dynstep
def test_marked_on_a_sound_inductor():
    model = torch.compile(Tiny().eval())
    assert model(torch.randn(4, 8)).shape == (4, 8)
    assert model.lin.out_features == 8           # the compiled module's attributes still answer


def test_the_fixture_on_the_buggy_inductor(relu_bug, dynstep_compare):
    dynstep_compare(Tiny().eval(), torch.randn(4, 8))
'''


def run(pytester, *args):
    pytester.makepyfile(test_user=USER_TESTS)
    env = {"TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    for key, value in env.items():
        if value:
            pytester._monkeypatch.setenv(key, value)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=600)


def test_a_mismatch_fails_with_the_first_divergent_node_and_its_line(pytester):
    record = pytester.path / "failed"
    result = run(pytester, "--dynstep-compare=inductor", f"--dynstep-record={record}")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert "dynstep: comparing torch.compile(backend='inductor') with eager" in out
    assert "DynstepMismatch: dynstep: torch.compile(backend='inductor') of Tiny differs from eager" in out
    assert "output 0: float32[4, 8]:" in out and "elements differ; max abs 2" in out
    # once per failing test in the failure sections; pytest repeats the whole message in its short
    # summary when it runs on CI (the CI variable set), so the summary is left out of the count
    failures = out.split("short test summary info")[0]
    assert failures.count("first divergent node: relu (torch.relu) at test_user.py:13, kernel cpp_fused_mul_relu_0") == 2
    assert "`return torch.relu(h) * 2`" in out and "error vs float64" in out
    assert "torch.__trace" not in out                          # no captured structured-trace lines
    recordings = sorted(p.name for p in record.iterdir())
    assert recordings == ["test_user.py_test_marked_on_the_buggy_inductor.dynstep",
                          "test_user.py_test_the_fixture_on_the_buggy_inductor.dynstep"]
    assert f"dynstep report {record / recordings[0]}" in out


def test_without_the_option_marked_tests_run_unchanged(pytester):
    result = run(pytester, "-k", "marked")
    result.assert_outcomes(passed=2)
    assert "dynstep: comparing" not in result.stdout.str()


def test_loading_the_plugin_imports_neither_torch_nor_dynstep_s_engine():
    code = ("import sys, dynstep.front.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or m.startswith('dynstep.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "['dynstep.front', 'dynstep.front.pytest_plugin']"


def test_normal_use_never_imports_the_plugin():
    code = ("import sys, dynstep, dynstep.front.cli, dynstep.backends.superstep, dynstep.report.model\n"
            "with dynstep.session(): pass\nprint('dynstep.front.pytest_plugin' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True).stdout
    assert out.strip() == "False"


def test_a_sound_backend_passes(pytester):
    result = run(pytester, "--dynstep-compare=aot_eager", "-k", "sound")
    result.assert_outcomes(passed=1)
