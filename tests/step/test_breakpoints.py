"""dynstep.breakpoint(): a compile-time stop and a runtime stop from one call, without a graph break."""

import re

import pytest
import torch
import torch.nn as nn

import dynstep
from dynstep import _compat
from dynstep.core.events import CompileViewShown, Evaluated, Stopped


class Block(nn.Module):
    """A transformer-style block with a breakpoint after the attention residual."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.ln(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        dynstep.breakpoint()
        return x + self.mlp(x)


def views(events, kind):
    return [e.view for e in events if isinstance(e, CompileViewShown) and e.view.kind == kind]


def evaluated(events):
    return {e.expr: e.text for e in events if isinstance(e, Evaluated)}


@pytest.mark.slow
def test_both_stops_on_a_transformer_block_under_inductor_fullgraph(events):
    torch.manual_seed(0)
    block, x = Block().eval(), torch.randn(2, 5, 16)
    with torch.no_grad():
        h = block.ln(x)
        expected_x = x + block.attn(h, h, h, need_weights=False)[0]
        expected_out = block(x) if False else None  # eager run below, with the breakpoint disabled
    dynstep.breakpoints.disable()
    try:
        with torch.no_grad():
            expected_out = block(x)
    finally:
        dynstep.breakpoints.enable()
    dynstep.configure(commands="locals; c; p x.abs().max().item(); c")
    cm = torch.compile(block, fullgraph=True)
    with torch.no_grad():
        out = cm(x)
    assert torch.allclose(out, expected_out, atol=1e-5)
    (stop,) = views(events, "stop")
    assert "compile 0/0" in stop.lines[1] and "dynstep.breakpoint()" in stop.lines[0]
    (locals_view,) = views(events, "locals")
    rows = "\n".join(locals_view.lines)
    assert "x = FakeTensor float32[2, 5, 16] cpu" in rows
    assert "h = FakeTensor float32[2, 5, 16] cpu" in rows and "a = FakeTensor" in rows
    (runtime,) = [e for e in events if isinstance(e, Stopped)]
    assert runtime.reason == "breakpoint" and runtime.site.source.startswith("test_breakpoints.py:")
    assert float(evaluated(events)["x.abs().max().item()"]) == pytest.approx(expected_x.abs().max().item(), rel=1e-5)


def test_runtime_values_equal_eager_values_and_set_changes_output(events):
    def f(x, w):
        h = x @ w
        dynstep.breakpoint()
        return torch.relu(h) + 1

    x, w = torch.randn(3, 4), torch.randn(4, 5)
    dynstep.configure(commands="c; p h.sum().item(); set h = h * 0 - 1; c")
    out = torch.compile(f, backend="aot_eager", fullgraph=True)(x, w)
    assert float(evaluated(events)["h.sum().item()"]) == pytest.approx((x @ w).sum().item(), rel=1e-5)
    assert torch.equal(out, torch.ones(3, 5))  # relu(-1) + 1: the rest of the graph saw the new h


def test_no_graph_break():
    def f(x):
        y = x.sin()
        dynstep.breakpoint(compile=False)
        return y.cos()

    dynstep.configure(commands="")
    explanation = torch._dynamo.explain(f)(torch.randn(4))
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0


def test_when_fires_only_when_true(events):
    def f(x):
        h = x * 2
        dynstep.breakpoint(compile=False, when=lambda h: h.abs().max() > 10)
        return h + 1

    dynstep.configure(commands="p h.max().item(); c; p h.max().item(); c")
    cf = torch.compile(f, backend="eager", fullgraph=True)
    cf(torch.ones(3))           # max 2: no stop
    cf(torch.full((3,), 8.0))   # max 16: stop
    cf(torch.ones(3))
    stops = [e for e in events if isinstance(e, Stopped)]
    assert len(stops) == 1
    assert evaluated(events)["h.max().item()"] == "16.0"


def test_disabled_breakpoints_leave_generated_code_identical():
    def with_bp(x):
        y = x.exp()
        dynstep.breakpoint()
        return y * 2

    def without(x):
        y = x.exp()
        return y * 2

    dynstep.breakpoints.disable()
    try:
        _, code_bp = _compat.run_and_get_code(torch.compile(with_bp), torch.randn(8))
    finally:
        dynstep.breakpoints.enable()
    torch._dynamo.reset()
    _, code_plain = _compat.run_and_get_code(torch.compile(without), torch.randn(8))
    strip = lambda codes: [c.replace("with_bp", "F").replace("without", "F") for c in codes]  # noqa: E731
    assert strip(code_bp) == strip(code_plain)
    assert not any("breakpoint" in c for c in code_bp)


def test_recompile_shows_a_second_compile_stop_with_the_reason(events):
    def f(x):
        y = x + 1
        dynstep.breakpoint(run=False)
        return y

    dynstep.configure(commands="c; c")
    torch._dynamo.config.automatic_dynamic_shapes = False
    try:
        cf = torch.compile(f, backend="eager")
        cf(torch.ones(2))
        cf(torch.ones(3))
    finally:
        torch._dynamo.config.automatic_dynamic_shapes = True
    stops = views(events, "stop")
    assert len(stops) == 2
    assert "compile 0/0" in stops[0].lines[1] and "recompiled" not in stops[0].lines[1]
    assert "compile 0/1" in stops[1].lines[1] and "size mismatch" in stops[1].lines[1]


def test_inlined_function_loop_and_module(events):
    def helper(t):
        u = t * 3
        dynstep.breakpoint(run=False)
        return u

    def f(x):
        for _ in range(2):
            x = helper(x)
        return x

    dynstep.configure(commands="bt; c; c")
    torch.compile(f, backend="eager", fullgraph=True)(torch.ones(2))
    stops = views(events, "stop")
    assert len(stops) == 2 and "occurrence 1" in stops[1].lines[1]
    (bt,) = views(events, "bt")
    assert any("in f" in line for line in bt.lines) and any("in helper" in line for line in bt.lines)


def test_dynamic_shapes_show_symbolic_sizes(events):
    def f(x):
        n = x.shape[0]
        y = x.relu()
        dynstep.breakpoint(run=False)
        return y * n

    dynstep.configure(commands="locals; c")
    torch.compile(f, backend="eager", dynamic=True)(torch.ones(5, 2))
    (locals_view,) = views(events, "locals")
    text = "\n".join(locals_view.lines)
    assert "FakeTensor float32[s" in text and "n = " in text


def test_eager_code_stops_with_the_locals(events):
    def f(x):
        h = x + 1
        dynstep.breakpoint()
        return h * 2

    dynstep.configure(commands="p h.tolist(); set h = h * 0; c")
    out = f(torch.ones(2))
    assert evaluated(events)["h.tolist()"] == "[2.0, 2.0]"
    assert torch.equal(out, torch.zeros(2))


def test_quit_at_compile_stop_aborts():
    def f(x):
        dynstep.breakpoint()
        return x

    dynstep.configure(commands="q")
    with pytest.raises(dynstep.Abort):
        torch.compile(f, backend="eager")(torch.ones(1))


@pytest.mark.parametrize("when,words", [
    (lambda h: h.nosuch() > 0, "raised AttributeError"),
    (lambda h: h > 0, "returned a tensor of 3 elements"),
    (lambda g: g.max() > 0, "asks for ['g'], which are not tensor locals there"),
])
def test_a_when_that_cannot_answer_warns_and_stops_instead_of_crashing(events, when, words):
    """Issue 14 item 13: a failing when= used to end the program with a 30-frame traceback."""
    def f(x):
        h = x * 2
        dynstep.breakpoint(compile=False, when=when)
        return h + 1

    dynstep.configure(commands="p h.sum().item(); c")
    cf = torch.compile(f, backend="eager", fullgraph=True)
    with pytest.warns(RuntimeWarning, match=r"dynstep.breakpoint\(when=...\) at test_breakpoints.py:\d+ " + re.escape(words)):
        out = cf(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 3.0))
    assert len([e for e in events if isinstance(e, Stopped)]) == 1
