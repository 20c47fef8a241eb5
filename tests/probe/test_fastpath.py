"""dynstep.probe.fastpath (imported by generated code as dynstep.fastpath): Inductor's wrapper calls the native probe directly, and it behaves like the op."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import dynstep
from dynstep import _compat
from dynstep.probe import fastpath, registration

from ..conftest import module_outputs_eager

registration.ensure()   # the probe's kernels, the native one when it builds (what compiling with probes does)

native_cpu = pytest.mark.skipif(not _compat.has_kernel("dynstep::probe", "CPU"),
                                reason="no native CPU kernel registered for dynstep::probe")


def _site(actions, **kw):
    from dynstep.core.sites import SITES

    return SITES.add(kind="value", probe="t", node="n", target="t", module="", source="t:1", source_text="",
                     graph="t", actions=actions, capacity=4, **kw).id


@pytest.mark.slow
def test_inductor_wrapper_calls_the_probe_directly_with_the_same_records(gpt):
    model, idx = gpt
    names = ["blocks.0.mlp", "blocks.1.attn"]
    expected = module_outputs_eager(model, idx, names)
    cm = torch.compile(model, backend="superstep",
                       options={"probe": [f"module:{n}" for n in names], "actions": ["record"]})
    with torch.no_grad(), dynstep.session() as s:
        _, codes = _compat.run_and_get_code(cm, idx)
    code = "\n".join(codes)
    assert fastpath.IMPORT_LINE in code
    assert code.count("dynstep_probe(") == 2
    assert "torch.ops.dynstep.probe.default(" not in code
    assert not any(t in code for t in ("with_effects", "_make_token", "_sink_tokens"))  # no run-time tokens
    for name in names:
        (snap,) = s.records(f"module:{name}")
        torch.testing.assert_close(snap.tensor, expected[name][0], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("env,wrapper_line", [({"DYNSTEP_FAST_PROBE": "0"}, "torch.ops.dynstep.probe.default(buf"),
                                              ({"DYNSTEP_NATIVE": "0"}, "dynstep_probe(buf")])
def test_kill_switches_keep_probes_working(tmp_path, env, wrapper_line):
    """DYNSTEP_FAST_PROBE=0 keeps Inductor's op call; without the native kernel the direct name is the op."""
    script = textwrap.dedent("""
        import torch, dynstep
        from dynstep import _compat
        from dynstep.probe import fastpath
        p = dynstep.TensorProbe("mid", [dynstep.RecordAction(4)], when="always")
        f = torch.compile(lambda x: p(x.sin()) * 2, fullgraph=True)
        x = torch.randn(16)
        _, codes = _compat.run_and_get_code(f, x)
        f(x)
        assert [r.call for r in p.records()] == [0, 1], p.records()
        torch.testing.assert_close(p.records()[1].tensor, x.sin())
        print(fastpath.status())
        print("\\n".join(codes))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert wrapper_line in run.stdout
    status = run.stdout.splitlines()[0]
    assert ("DYNSTEP_FAST_PROBE=0" in status) if "DYNSTEP_FAST_PROBE" in env else ("no native kernel" in status)


@native_cpu
def test_direct_call_records_like_the_op():
    site = _site(("record",))
    x = torch.arange(6.0).reshape(2, 3)
    with dynstep.session() as s:
        fastpath.probe(x, site)
        torch.ops.dynstep.probe(x * 2, site)
    a, b = s.records()
    assert (a.call, b.call) == (0, 1)
    assert torch.equal(a.tensor, x) and torch.equal(b.tensor, x * 2)
    assert a.stats["max"] == 5.0 and a.stats["mean"] == 2.5


@native_cpu
def test_direct_call_raises_what_the_op_raises():
    from dynstep.core.sites import HandConfig

    site = _site(("record",), hand=HandConfig(when="always", non_contiguous="error"))
    x = torch.randn(3, 4).t()
    with pytest.raises(ValueError, match="is not contiguous"):
        fastpath.probe(x, site)
    with pytest.raises(ValueError, match="is not contiguous"):
        torch.ops.dynstep.probe(x, site)
    with pytest.raises(TypeError, match="takes a tensor and an int"):
        fastpath.probe("x", site)


@native_cpu
def test_nonfinite_raise_from_a_python_callback_passes_through_the_direct_call():
    site = _site(("nan",), nan_mode="raise")
    with pytest.raises(dynstep.NonFiniteError, match="1 NaN"):
        fastpath.probe(torch.tensor([1.0, float("nan")]), site)


@native_cpu
def test_direct_call_defers_to_the_dispatcher_under_a_dispatch_mode():
    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    site = _site(("summary",))
    with Log():
        fastpath.probe(torch.ones(3), site)
    assert "dynstep.probe.default" in seen


@native_cpu
def test_direct_call_appears_in_the_profiler():
    site = _site(("summary",))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fastpath.probe(torch.ones(3), site)
    assert "dynstep::probe" in {e.key for e in prof.key_averages()}


def test_aot_eager_graphs_call_the_probe_without_effect_tokens(mlp, monkeypatch):
    """superstep drops AOTAutograd's run-time tokens around its probes under aot_eager (Python runs
    that graph: with_effects costs ~50-80 µs per probe there); values and gradients are unchanged."""
    from dynstep.backends import probe_pass as passes

    graphs = []
    original = passes.direct_probe_calls

    def spy(gm):
        out = original(gm)
        graphs.append([(n.op, n.target) for n in out.graph.nodes])
        return out

    monkeypatch.setattr(passes, "direct_probe_calls", spy)
    model, x = mlp
    cm = torch.compile(model, backend="superstep", options={"inner": "aot_eager", "probe": ["module:fc1", "module:act"],
                                                            "grads": True, "actions": ["record"]})
    with dynstep.session() as s:
        cm(x).sum().backward()
    forward, backward = graphs
    for g in graphs:
        assert not any(t is torch.ops.higher_order.with_effects for _, t in g)
        assert not any(t is torch.ops.dynstep.probe.default for _, t in g)
    assert sum(t is fastpath.probe for _, t in forward) == 2 and sum(t is fastpath.probe for _, t in backward) == 2
    h = model.fc1(x)
    torch.testing.assert_close(s.records("module:fc1", kind="value")[0].tensor, h.detach())
    torch.testing.assert_close(s.records("module:act", kind="value")[0].tensor, model.act(h).detach())
    assert len(s.records(kind="grad")) == 2
