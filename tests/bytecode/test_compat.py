"""Each private torch API the bytecode stepper relies on (dynstep/_compat/) exists on the
installed torch and behaves as the stepper assumes; an upgrade that changes one fails here.
Both ways of learning Dynamo's code objects (torch's debugger callback, Dynamo's bytecode hook)
and both value-stack readers (torch's, dynstep's native one) are checked wherever torch has them."""

from __future__ import annotations

import sys

import pytest
import torch

from dynstep import _compat

from .conftest import available_mechanisms


def _f(x):
    return x + 1


def _with_break(x, log):
    y = torch.sin(x)
    log.append(1)
    print("graph break")              # the rest is a resume function Dynamo compiles when it first runs
    return torch.cos(y)


BREAK_LINE = _with_break.__code__.co_firstlineno + 3


def _names(codes):
    return sorted({c.co_name for c in codes})


def test_bytecode_hook_sees_each_transformed_code_and_resume_function_as_dynamo_makes_it():
    seen = []
    handle = _compat.register_dynamo_bytecode_hook(seen.append)
    try:
        out = torch.compile(_with_break, backend="eager")(torch.ones(2), [])
    finally:
        handle.remove()
    assert torch.allclose(out, torch.cos(torch.sin(torch.ones(2))))      # Dynamo kept its own code
    assert _names(seen) == sorted(["_with_break", f"torch_dynamo_resume_in__with_break_at_{BREAK_LINE}"])
    transformed = next(c for c in seen if c.co_name == "_with_break")
    assert transformed is not _with_break.__code__ and _compat.original_code(transformed) is _with_break.__code__
    resume = next(c for c in seen if c.co_name != "_with_break")
    assert _compat.original_code(resume) is not None and _compat.original_code(resume) is not resume
    assert {id(c) for c in seen} <= {id(c) for c in _compat.dynamo_output_codes()}
    torch._dynamo.reset()
    torch.compile(_f, backend="eager")(torch.ones(2))
    assert "_f" not in _names(seen)                                       # removed: sees nothing more


def test_dynamo_output_codes_lists_what_was_compiled_until_a_reset():
    torch.compile(_f, backend="eager")(torch.ones(2))
    codes = _compat.dynamo_output_codes()
    assert _names(codes) == ["_f"] and _compat.cache_entries(_f.__code__)[0].code is codes[0]
    torch._dynamo.reset()
    assert _compat.dynamo_output_codes() == []


@pytest.mark.parametrize("kind", available_mechanisms())
def test_each_code_source_reports_code_compiled_before_and_inside_then_restores(kind):
    from torch._dynamo import convert_frame

    from dynstep.bytecode.hooks import code_source

    cf = torch.compile(_with_break, backend="eager")
    cf(torch.ones(2), [])                         # both code objects compiled before the source is installed
    seen, other = [], []
    hooks_before = dict(convert_frame._bytecode_hooks)
    previous = _compat.set_dynamo_code_callback(other.append) if kind == "callback" else None
    with code_source(kind, seen.append):
        cf(torch.ones(2), [])                     # the callback reports them as they run; the hook at install
        torch.compile(_f, backend="eager")(torch.ones(2))
    assert _names(seen) == sorted(["_f", "_with_break", f"torch_dynamo_resume_in__with_break_at_{BREAK_LINE}"])
    if kind == "callback":                        # torch's callback: the one set before is back
        assert _compat.set_dynamo_code_callback(previous) == other.append
    assert dict(convert_frame._bytecode_hooks) == hooks_before
    assert _compat.original_code(next(c for c in seen if c.co_name == "_f")) is _f.__code__
    count = len(seen)
    torch._dynamo.reset()
    cf(torch.ones(2), [])
    assert len(seen) == count


def _readers() -> list[str]:
    return (["torch"] if _compat.bytecode_hooks_missing() is None else []) + ["native"]


@pytest.mark.parametrize("reader", _readers())
def test_frame_value_stack_reads_the_real_stack(reader):
    from dynstep.bytecode import framestack

    read = _compat.frame_value_stack if reader == "torch" else framestack.read

    def probe():
        frame = sys._getframe(1)
        return read(frame, 3)

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
