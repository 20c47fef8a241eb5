"""Each private torch API the bytecode stepper relies on (dynstep/_compat/) exists on the
installed torch and behaves as the stepper assumes; an upgrade that changes one fails here."""

from __future__ import annotations

import sys

import pytest
import torch

from dynstep import _compat

needs_hooks = pytest.mark.skipif(_compat.bytecode_hooks_missing() is not None,
                                 reason=str(_compat.bytecode_hooks_missing()))


def _f(x):
    return x + 1


@needs_hooks
def test_dynamo_code_callback_sees_transformed_code_and_restores_the_previous_one():
    seen = []
    cf = torch.compile(_f, backend="eager")
    cf(torch.ones(2))                       # compiled before the callback is set
    previous = _compat.set_dynamo_code_callback(seen.append)
    try:
        cf(torch.ones(2))                   # ... still reported when it runs again
    finally:
        mine = _compat.set_dynamo_code_callback(previous)
    assert mine == seen.append
    assert [c.co_name for c in seen] == ["_f"] and seen[0] is not _f.__code__
    assert _compat.original_code(seen[0]) is _f.__code__


@needs_hooks
def test_frame_value_stack_reads_the_real_stack():
    def probe():
        frame = sys._getframe(1)
        return _compat.frame_value_stack(frame, 3)

    marker = object()
    # the stack of this frame while probe() runs holds the list under construction and marker
    values = [marker, probe()]
    stack = values[1]
    assert any(v is marker for v in stack)


def test_cache_entries_have_guard_code_and_recompile_reasons():
    def g(x):
        return x * 2

    cg = torch.compile(g, backend="eager", dynamic=False)
    cg(torch.ones(2))
    cg(torch.ones(2, dtype=torch.float64))
    entries = _compat.cache_entries(g.__code__)
    assert len(entries) == 2
    assert all(e.code is not g.__code__ and e.guard_manager.code_parts for e in entries)
    verbose = entries[0].guard_manager.check_verbose({"x": torch.ones(2)})
    assert not verbose.result and any("dtype mismatch" in p for p in verbose.verbose_code_parts)
    assert any("dtype mismatch" in r for r in _compat.recompile_reasons(g.__code__))


def test_wrap_dynamo_compiler_routes_every_graph_and_restores():
    from torch._dynamo.output_graph import OutputGraph

    original = OutputGraph._call_user_compiler
    names = []

    def wrap(compiler_fn):
        def backend(gm, example_inputs):
            names.append(gm.__class__.__name__)
            return compiler_fn(gm, example_inputs)
        return backend

    with _compat.wrap_dynamo_compiler(wrap):
        out = torch.compile(_f, backend="eager")(torch.ones(2))
    assert names == ["GraphModule"] and torch.equal(out, torch.full((2,), 2.0))
    assert OutputGraph._call_user_compiler is original


def test_a_torch_without_the_hooks_gets_a_clear_error_and_nothing_is_installed(monkeypatch):
    import dynstep
    from dynstep.front.doctor import report
    from dynstep.core.errors import UnsupportedTorch

    why = "torch 2.11.0 lacks torch._C._dynamo.eval_frame.set_bytecode_debugger_callback"
    monkeypatch.setattr(_compat, "bytecode_hooks_missing", lambda: why)
    monkeypatch.setattr(_compat, "set_dynamo_code_callback", lambda fn: pytest.fail("a hook was installed"))
    with pytest.raises(UnsupportedTorch, match="bytecode stepper cannot run here: torch 2.11.0 lacks"):
        with dynstep.step_bytecode(commands="c"):
            pass
    assert sys.gettrace() is None
    lines, _ = report()
    assert f"bytecode stepper (step_bytecode, dynstep run --step-bytecode): unavailable: {why}" in lines


def test_dynstep_run_step_bytecode_on_such_a_torch_says_why_and_runs_nothing(monkeypatch, tmp_path, capsys):
    from dynstep.front.runner import run

    monkeypatch.setattr(_compat, "bytecode_hooks_missing", lambda: "torch 2.11.0 lacks the hooks")
    script = tmp_path / "train.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    assert run(str(script), [], {}, step_bytecode=True) == 2
    assert "dynstep run --step-bytecode: the bytecode stepper cannot run here: torch 2.11.0 lacks the hooks" \
        in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()
