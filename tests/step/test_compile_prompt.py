"""Issue 30 item 1: the compile-time stop of dynstep.breakpoint() is an expression prompt (as at a
`comptime.breakpoint()` stop), and `graph`/`guards`/`locals` keep working at the runtime stop of the
same breakpoint; item 6: the per-compile occurrence count restarts after torch._dynamo.reset()."""

from __future__ import annotations

import inspect

import torch

import dynstep
from dynstep.core.events import CommandFailed, CompileViewShown, Evaluated, Stopped


def views(events, kind):
    return [e.view for e in events if isinstance(e, CompileViewShown) and e.view.kind == kind]


def evaluated(events):
    return {e.expr: e.text for e in events if isinstance(e, Evaluated)}


def failures(events):
    return [e.message for e in events if isinstance(e, CommandFailed)]


def test_compile_time_p_evaluates_any_expression_over_fakes_graph_guards_and_ctx(events):
    def f(x, scale: int):
        n = x.shape[0]
        h = x.relu() * scale
        tag = "proj"
        dynstep.breakpoint(run=False)
        return h + n

    dynstep.configure(commands="; ".join([
        "p h.shape[1] * 10", "p (h @ h.T).shape", "p scale + 1", "p tag.upper()", "p [node.name for node in graph.nodes]",
        "p sorted({g.kind for g in guards})", "p type(n).__name__", "p ctx.get_local('h').as_fake().dtype",
        "p nosuch + 1", "c"]))
    out = torch.compile(f, backend="eager", dynamic=True)(torch.ones(5, 3), 4)
    assert torch.equal(out, torch.full((5, 3), 9.0))
    got = evaluated(events)
    assert got["h.shape[1] * 10"].startswith("10*s")      # symbolic arithmetic on a symbolic size
    assert got["(h @ h.T).shape"].startswith("torch.Size([s") and "s" in got["(h @ h.T).shape"]
    assert got["scale + 1"].startswith("s") and got["scale + 1"].endswith(" + 1")   # dynamic=True: a SymInt
    assert got["tag.upper()"] == "'PROJ'"                                              # a constant, as itself
    assert "'relu', 'h']" in got["[node.name for node in graph.nodes]"]       # Dynamo names nodes after locals
    assert "TENSOR_MATCH" in got["sorted({g.kind for g in guards})"]
    assert got["type(n).__name__"] == "'SymInt'"
    assert got["ctx.get_local('h').as_fake().dtype"] == "torch.float32"
    (missing,) = failures(events)
    assert "nosuch" in missing and "graph, guards, shape_guards and ctx" in missing


def test_looking_at_symbolic_sizes_adds_no_guard(events):
    """`p h.shape[0] > 100` compares a symbolic size: without suppressing guards it would specialise
    the graph to sizes <= 100 and the call with 200 rows would recompile (a second compile-time stop)."""
    def f(x):
        h = x * 2
        dynstep.breakpoint(run=False)
        return h + 1

    dynstep.configure(commands="p h.shape[0] > 100; c; c")
    cf = torch.compile(f, backend="eager", dynamic=True)
    cf(torch.ones(5))
    cf(torch.ones(200))
    assert evaluated(events)["h.shape[0] > 100"].endswith(" > 100")    # a SymBool, left symbolic
    assert len(views(events, "stop")) == 1


def test_graph_locals_and_guards_work_at_the_runtime_stop_of_the_same_breakpoint(events):
    """Used to fail with "no listing for graph f[0/0] (a probe stop outside a stepped graph)"."""
    def f(x, w):
        h = x @ w
        tag = "proj"
        dynstep.breakpoint()
        return torch.relu(h)

    x, w = torch.ones(2, 3), torch.ones(3, 4)
    dynstep.configure(commands="c; graph; locals; guards; c")
    torch.compile(f, backend="aot_eager", fullgraph=True)(x, w)
    assert [type(e).__name__ for e in events if isinstance(e, Stopped)] == ["Stopped"]
    assert failures(events) == []
    graphs = views(events, "graph")
    assert "traced up to" in graphs[-1].title and any("matmul" in line or "@" in line for line in graphs[-1].lines)
    (runtime_locals,) = [v for v in views(events, "locals") if v.title.startswith("locals at breakpoint@")]
    text = "\n".join(runtime_locals.lines)
    assert "h = tensor([[3., 3., 3., 3.]," in text
    assert "tag = 'proj'   (as Dynamo saw it at compile 0/0)" in text
    guards = views(events, "guards")[-1]
    assert guards.title.startswith("guards of compile 0/0") and any("TENSOR_MATCH" in g for g in guards.lines)


def test_after_dynamo_reset_the_first_compile_stop_is_not_occurrence_1(events):
    """Item 6: the per-compile count was keyed by compile id, which restarts at 0/0 after
    torch._dynamo.reset(): the next compile's first stop said "occurrence 1" and its node was
    breakpoint@N#1."""
    def f(x):
        y = x + 1
        dynstep.breakpoint()
        return y

    line = inspect.getsourcelines(f)[1] + 2
    dynstep.configure(commands="c; c; c; c; c; c")
    for _ in range(2):
        torch.compile(f, backend="eager", fullgraph=True)(torch.ones(2))
        torch._dynamo.reset()
    torch._dynamo.explain(f)(torch.ones(2))
    stops = views(events, "stop")
    assert len(stops) == 3 and not any("occurrence" in s.lines[1] for s in stops)
    nodes = {e.site.node for e in events if isinstance(e, Stopped)}
    assert nodes == {f"breakpoint@{line}"}
