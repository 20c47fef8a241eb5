"""Which mechanism the bytecode stepper runs on (dynstep/bytecode/mechanism.py), what a torch without
torch's debugger hooks (2.11) gets, what one with no hook at all gets, and doctor's lines."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import dynstep
from dynstep import _compat
from dynstep.bytecode import framestack, mechanism
from dynstep.bytecode.events import BytecodeStopped, ValuesShown
from dynstep.core.errors import UnsupportedTorch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINE = "bytecode stepper (step_bytecode, dynstep run --step-bytecode): "
TORCH_211 = "torch 2.11.0 lacks torch._C._dynamo.eval_frame.set_bytecode_debugger_callback"


def f(x, log):
    y = torch.sin(x) * 2
    log.append(1)
    return y + 1


def _doctor_lines() -> list[str]:
    from dynstep.front.doctor import report

    lines, _ = report()
    return lines


def _like_torch_211(monkeypatch) -> None:
    """torch 2.11: none of the debugger hooks; reaching for one fails the test."""
    monkeypatch.setattr(_compat, "bytecode_hooks_missing", lambda: TORCH_211)
    monkeypatch.setattr(_compat, "set_dynamo_code_callback", lambda fn: pytest.fail("torch's callback was used"))
    monkeypatch.setattr(_compat, "frame_value_stack", lambda *a: pytest.fail("torch's stack reader was used"))


def test_auto_prefers_torchs_own_hooks_where_torch_has_them(monkeypatch):
    monkeypatch.delenv(mechanism.ENV, raising=False)
    chosen = mechanism.choose()
    want = "callback" if _compat.bytecode_hooks_missing() is None else "hook"
    assert chosen.codes == want and not chosen.forced
    assert chosen.events == ("sys.monitoring" if sys.version_info >= (3, 12) else "settrace")
    lines = _doctor_lines()
    assert f"{LINE}available: {chosen.describe()}" in lines and lines[lines.index(f"{LINE}available: "
                                                                                 f"{chosen.describe()}")].endswith("(auto)")
    use = "used by the stepper here" if want == "hook" else "not used here: torch reads the stack itself"
    assert any(ln.startswith(f"  native value-stack reader (csrc/frame_stack.c): loaded, {use}") for ln in lines)


def test_a_torch_without_the_debugger_hooks_steps_on_the_bytecode_hook_and_native_reader(monkeypatch, events):
    _like_torch_211(monkeypatch)
    monkeypatch.delenv(mechanism.ENV, raising=False)
    assert mechanism.choose() == mechanism.Mechanism("hook", "native", mechanism.events_source(), forced=False)
    cf = torch.compile(f, backend="eager")
    log: list[int] = []
    with dynstep.step_bytecode(commands="b graph; c; stack; p stack[-1] is x; c") as engine:
        out = cf(torch.ones(3), log)
    assert engine.mechanism.codes == "hook" and torch.equal(out, torch.sin(torch.ones(3)) * 2 + 1) and log == [1]
    stop = [e for e in events if isinstance(e, BytecodeStopped)][-1]
    assert stop.reason == "break" and stop.graph_call
    stack = [e for e in events if isinstance(e, ValuesShown)][0].entries
    assert [text for _, text in stack].count("'<NULL>'") == 1 and stack[-1][1] == "tensor([1., 1., 1.])"
    lines = _doctor_lines()
    assert LINE + ("available: code objects from Dynamo's bytecode hook (register_bytecode_hook); value stack "
                   "by dynstep's native reader (csrc/frame_stack.c); instruction events by "
                   f"{mechanism.events_source()} (auto)") in lines
    assert any(ln.startswith("  native value-stack reader (csrc/frame_stack.c): loaded, used by the stepper here")
               for ln in lines)


def test_a_torch_with_no_hook_at_all_gets_a_clear_error_and_nothing_is_installed(monkeypatch, capsys, tmp_path):
    from dynstep.front.runner import run

    _like_torch_211(monkeypatch)
    why = "torch 2.0.0 lacks torch._dynamo.convert_frame.register_bytecode_hook"
    monkeypatch.setattr(_compat, "bytecode_hook_missing", lambda: why)
    monkeypatch.setattr(_compat, "register_dynamo_bytecode_hook", lambda fn: pytest.fail("a hook was installed"))
    with pytest.raises(UnsupportedTorch, match=f"bytecode stepper cannot run here: {why}, and {TORCH_211}"):
        with dynstep.step_bytecode(commands="c"):
            pass
    assert sys.gettrace() is None
    assert f"{LINE}unavailable: {why}, and {TORCH_211}" in _doctor_lines()
    script = tmp_path / "train.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    assert run(str(script), [], {}, step_bytecode=True) == 2
    assert f"dynstep run --step-bytecode: the bytecode stepper cannot run here: {why}" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()


def test_forcing_a_mechanism_torch_lacks_or_an_unknown_one_says_what_to_do(monkeypatch):
    _like_torch_211(monkeypatch)
    monkeypatch.setenv(mechanism.ENV, "callback")
    with pytest.raises(UnsupportedTorch, match=f"{mechanism.ENV}=callback, but {TORCH_211}; use {mechanism.ENV}=hook"):
        with dynstep.step_bytecode(commands="c"):
            pass
    monkeypatch.setenv(mechanism.ENV, "frobnicate")
    with pytest.raises(ValueError, match="expected one of auto, callback, hook"):
        mechanism.choose()


def test_without_the_native_reader_stack_says_why_and_stepping_goes_on(monkeypatch, events):
    monkeypatch.setenv(mechanism.ENV, "hook")
    monkeypatch.setattr(framestack, "_tried", True)
    monkeypatch.setattr(framestack, "_module", None)
    monkeypatch.setattr(framestack, "_status", framestack.FrameStackStatus(False, "build failed (no compiler)"))
    cf = torch.compile(f, backend="eager")
    with dynstep.step_bytecode(commands="b graph; c; stack; p x.shape; c"):
        cf(torch.ones(3), [])
    shown = [e for e in events if isinstance(e, ValuesShown)][0]
    assert shown.entries == () and "native value-stack reader is not available: build failed (no compiler)" \
        in shown.note
    assert [e.text for e in events if type(e).__name__ == "Evaluated"] == ["torch.Size([3])"]


def test_dynstep_doctor_names_the_mechanism_it_was_told_to_use():
    env = {**os.environ, "PYTHONPATH": ROOT, mechanism.ENV: "hook"}
    out = subprocess.run([sys.executable, "-m", "dynstep", "doctor"], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(LINE))
    assert line == (f"{LINE}available: code objects from Dynamo's bytecode hook (register_bytecode_hook); value "
                    "stack by dynstep's native reader (csrc/frame_stack.c); instruction events by "
                    f"{mechanism.events_source()} (forced by {mechanism.ENV}=hook)")
    assert "  native value-stack reader (csrc/frame_stack.c): loaded, used by the stepper here (" in out.stdout
