"""The `dynstep` command line, run as a user would: a subprocess."""

import subprocess
import sys


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dynstep", *args], capture_output=True, text=True, timeout=timeout)


def test_demo_prints_a_table_of_every_block():
    out = run("demo", "--inner", "aot_eager", "--steps", "1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "forward values" in text and "gradients flowing" in text
    for name in ("blocks.0", "blocks.1", "blocks.0.attn", "blocks.1.mlp", "ln_f"):
        assert name in text
    assert "model.py:" in text and "max |diff|" in text


def test_doctor_reports_backend_and_kernels():
    out = run("doctor")
    assert out.returncode == 0, out.stderr
    assert "backend 'superstep' registered through torch_dynamo_backends: True" in out.stdout
    assert "dynstep::probe" in out.stdout


def test_unknown_verb_is_a_usage_error():
    out = run("frobnicate")
    assert out.returncode == 2 and "invalid choice" in out.stderr
