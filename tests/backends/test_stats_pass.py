"""Summary probes computed inside Inductor's kernels (backends/stats_pass.py), on real torch.compile runs:
the statistics equal a float64 reference for every dtype and layout the probe summarises, the generated
code hands no probed value to an extern call, the kernel count stays within one of the unprobed
compile's, hits keep graph order across fused and unfused probes, and outputs stay bitwise the same."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys

import pytest
import torch

import dynstep
from dynstep import _compat
from dynstep.backends import stats_pass
from dynstep.recording.compile_log import COMPILE_LOG
from dynstep.recording.facts import KernelCount

pytestmark = pytest.mark.slow   # every test compiles with Inductor


@pytest.fixture
def fuse_all(monkeypatch):
    """Fuse values of any size (the default keeps the extern call under 16 Ki elements)."""
    monkeypatch.setattr(stats_pass, "FUSE_MIN_NUMEL", 1)


def reference(v: torch.Tensor) -> dict[str, float | int]:
    """Today's summary, computed in eager float64 on the same values."""
    d = v.detach().to(torch.float64).reshape(-1)
    fin = d[torch.isfinite(d)]
    n = fin.numel()
    out = {"nan": int(torch.isnan(d).sum()), "inf": int(torch.isinf(d).sum()), "count": n}
    if n:
        out.update(min=fin.min().item(), max=fin.max().item(), mean=fin.mean().item(),
                   std=fin.std().item() if n > 1 else math.nan, absmax=fin.abs().max().item())
    return out


def assert_same_stats(stats, ref: dict, rel: float = 1e-12) -> None:
    for key in ("nan", "inf", "count"):
        assert stats[key] == ref[key], (key, stats[key], ref[key])
    if ref["count"] == 0:
        assert all(math.isnan(stats[k]) for k in ("min", "max", "mean", "std", "absmax"))
        return
    for key in ("min", "max", "absmax"):     # exact: the value's own numbers
        assert stats[key] == ref[key], (key, stats[key], ref[key])
    for key in ("mean", "std"):
        if math.isnan(ref[key]):
            assert math.isnan(stats[key]), key
        else:
            assert stats[key] == pytest.approx(ref[key], rel=rel, abs=1e-300), key


def probed_run(fn, *args, probe=("*",), **options):
    compiled = torch.compile(fn, backend=dynstep.superstep(probe=list(probe), **options), fullgraph=True)
    with dynstep.session() as s:
        out, code = _compat.run_and_get_code(compiled, *args)
    return out, "\n".join(code), s


def assert_fused(code: str) -> None:
    assert "dynstep_publish(" in code
    assert "dynstep_probe(" not in code and "torch.ops.dynstep.probe" not in code


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def sample(dtype: torch.dtype, shape=(7, 33), specials: bool = True) -> torch.Tensor:
    torch.manual_seed(1)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.3
    if dtype in INTS:
        info = torch.iinfo(dtype)
        return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, dtype=dtype)
    x = (torch.randn(shape, dtype=torch.float64) * 3 + 0.5).to(dtype)
    if specials and x.numel() >= 4:
        flat = x.view(-1)
        flat[1], flat[5], flat[-2] = math.nan, math.inf, -math.inf
    return x


def negate(x):
    return ~x if x.dtype == torch.bool else -x


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool], ids=str)
def test_fused_statistics_equal_a_float64_reference_for_every_dtype(fuse_all, dtype):
    x = sample(dtype)
    out, code, s = probed_run(negate, x)
    assert_fused(code)
    (snap,) = s.records("*")
    assert snap.shape == tuple(x.shape) and snap.dtype == str(dtype).replace("torch.", "") and snap.tensor is None
    assert_same_stats(snap.stats, reference(negate(x)))
    torch.testing.assert_close(out, negate(x), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("layout", ["0-dim", "non-contiguous", "channels_last", "all non-finite", "large offset"])
def test_fused_statistics_on_layouts_and_edge_values(fuse_all, layout):
    x = {"0-dim": torch.tensor(2.5),
         "non-contiguous": sample(torch.float32, (40, 24)).t(),
         "channels_last": sample(torch.float32, (2, 3, 8, 5)).to(memory_format=torch.channels_last),
         "all non-finite": torch.tensor([math.nan, math.inf, -math.inf] * 7),
         "large offset": (torch.randn(5000, dtype=torch.float64) + 1e3)}[layout]
    out, code, s = probed_run(negate, x)
    assert_fused(code)
    (snap,) = s.records("*")
    assert snap.shape == tuple(x.shape)
    # one-pass float64 sums: std loses ~(mean/std)^2 * 1e-16 relative, 1e-10 at mean/std = 1000
    assert_same_stats(snap.stats, reference(negate(x)), rel=1e-9 if layout == "large offset" else 1e-12)


def chain(x):
    for i in range(8):
        x = x * 1.0001 + 0.5 if i % 2 else torch.sin(x)
    return x


def test_generated_code_has_no_probe_call_and_no_more_than_one_extra_kernel():
    x = torch.randn(1 << 15)    # above the default size: fused without any setting
    out, code, s = probed_run(chain, x, probe=("op:sin", "op:add"))
    torch._dynamo.reset()
    plain, plain_code = _compat.run_and_get_code(torch.compile(chain, fullgraph=True), x)
    assert_fused(code)
    assert "buf" not in code.split("dynstep_publish(")[1].split("[")[0]   # the call takes statistics, not a value
    kernels = lambda c: c.count("async_compile.cpp_pybinding(")  # noqa: E731
    assert kernels(code) <= kernels("\n".join(plain_code)) + 1
    assert torch.equal(out, plain)
    assert [r.node for r in s.records("*")] == ["x", "x_1", "x_2", "x_3", "x_4", "x_5", "x_6", "x_7"]


def mixed(x):
    a = torch.sin(x)                 # fused (large)
    b = a[:16] * 2                   # small: the extern call
    c = torch.cos(a) + 1             # fused
    d = c[:8].exp()                  # small
    return c * 3, b, d


def test_hits_keep_graph_order_across_fused_and_unfused_probes():
    x = torch.randn(1 << 15)
    outs, code, s = probed_run(mixed, x, probe=("op:sin", "op:mul", "op:cos", "op:add", "op:exp"))
    assert "dynstep_publish(" in code and "dynstep_probe(" in code
    hits = sorted(s.records("*"), key=lambda r: r.seq)
    assert [h.target.rpartition(".")[2] for h in hits] == ["sin", "mul", "cos", "add", "exp", "mul"]
    assert [h.shape for h in hits] == [(1 << 15,), (16,), (1 << 15,), (1 << 15,), (8,), (1 << 15,)]
    # values the graph returns: the extern (b, d) and fused (c * 3) statistics against those very values
    for hit, value in ((hits[1], outs[1]), (hits[4], outs[2]), (hits[5], outs[0])):
        assert_same_stats(hit.stats, reference(value))
    torch._dynamo.reset()
    plain = torch.compile(mixed, fullgraph=True)(x)
    assert all(torch.equal(o, r) for o, r in zip(outs, plain))


def step(model, idx):
    model.zero_grad(set_to_none=True)
    logits = model(idx)
    logits.float().pow(2).mean().backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()]


def test_training_step_with_fused_probes_is_bitwise_plain_and_adds_at_most_one_kernel_per_graph(
        gpt, fuse_all, monkeypatch):
    model, idx = gpt
    ref_out, ref_grads = step(torch.compile(copy.deepcopy(model)), idx)
    monkeypatch.setenv("DYNSTEP_KERNEL_COUNTS", "1")
    mark = COMPILE_LOG.mark()
    cm = torch.compile(copy.deepcopy(model), backend="superstep", options={"probe": ["*"], "grads": True})
    with dynstep.session() as s:
        out, grads = step(cm, idx)
    assert torch.equal(out, ref_out) and all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
    counts = [e for e in COMPILE_LOG.entries()[mark:] if isinstance(e, KernelCount)]
    assert {c.phase for c in counts} == {"forward", "backward"}
    for c in counts:
        assert c.extern == 0 and c.fused > 0 and c.unprobed > 0, c
        assert c.kernels <= c.unprobed + 1, c
    hits = s.records("*")
    assert {h.kind for h in hits} == {"value", "grad"}
    assert sum(c.fused for c in counts) == len(hits)


@pytest.mark.timeout(900)   # four Inductor compiles of a GPT-2 training step: past 300 s on a loaded 2-core machine (torch 2.14.1)
def test_fused_and_extern_statistics_agree_on_a_training_step(gpt, fuse_all, monkeypatch):
    model, idx = gpt
    runs = []
    for fused in ("1", "0"):
        monkeypatch.setenv("DYNSTEP_FUSED_STATS", fused)
        torch._dynamo.reset()
        cm = torch.compile(copy.deepcopy(model), backend="superstep", options={"probe": ["in:blocks.0"], "grads": True})
        with dynstep.session() as s:
            step(cm, idx)
        runs.append(sorted(s.records("*"), key=lambda r: r.seq))
    fused_hits, extern_hits = runs
    # the same hits (the extern path runs the probes of constant values such as the attention mask
    # first, where Inductor computes them; the fused path keeps them in the graph's order)
    assert sorted((h.kind, h.node) for h in fused_hits) == sorted((h.kind, h.node) for h in extern_hits)
    values = [h.node for h in fused_hits if h.kind == "value"]
    assert values.index("layer_norm") < values.index("ones") < values.index("masked_fill")
    by_key = {(h.kind, h.node): h for h in extern_hits}
    for a in fused_hits:
        b = by_key[(a.kind, a.node)]
        assert (a.shape, a.dtype, a.stats.count, a.stats.nan, a.stats.inf) == (b.shape, b.dtype, b.stats.count,
                                                                                 b.stats.nan, b.stats.inf)
        assert (a.stats.min, a.stats.max, a.stats.absmax) == (b.stats.min, b.stats.max, b.stats.absmax)
        scale = max(abs(b.stats.mean), b.stats.std, 1e-30)
        assert abs(a.stats.mean - b.stats.mean) <= 1e-9 * scale and a.stats.std == pytest.approx(b.stats.std, rel=1e-9)


def test_dynamic_shapes_publish_each_call_s_own_shape(fuse_all):
    compiled = torch.compile(chain, backend=dynstep.superstep(probe=["op:sin"]), dynamic=True)
    with dynstep.session() as s:
        _, code = _compat.run_and_get_code(compiled, torch.randn(300))
        compiled(torch.randn(77))
    assert_fused("\n".join(code))
    hits = sorted(s.records("*"), key=lambda r: r.seq)
    assert [h.shape for h in hits] == [(300,)] * 4 + [(77,)] * 4
    assert [h.stats.count for h in hits] == [300] * 4 + [77] * 4


def test_a_streaming_session_receives_fused_hits_as_they_happen(fuse_all, tmp_path):
    x = torch.randn(64)
    compiled = torch.compile(chain, backend=dynstep.superstep(probe=["op:sin"]))
    with dynstep.session(path=tmp_path / "run.dynstep") as s:
        compiled(x)
        assert len(s.records("*")) == 4       # delivered during the call, not at the next read
    again = dynstep.load(tmp_path / "run.dynstep")
    assert [r.node for r in again.records("*")] == ["x", "x_2", "x_4", "x_6"]
    assert [k.fused for k in again.kernel_counts] == [4]
    out = subprocess.run([sys.executable, "-m", "dynstep", "report", str(tmp_path / "run.dynstep"), "--json",
                          str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "kernels" in out.stdout and "4 probe(s) computed in the kernels, 0 on a materialised value" in out.stdout
    (count,) = json.loads((tmp_path / "r.json").read_text())["kernels"]
    assert count["fused"] == 4 and count["extern"] == 0 and count["kernels"] >= 1


def test_kill_switch_keeps_the_extern_call(monkeypatch):
    monkeypatch.setenv("DYNSTEP_FUSED_STATS", "0")
    _, code, s = probed_run(chain, torch.randn(1 << 15), probe=("op:sin",))
    assert "dynstep_probe(" in code and "dynstep_publish(" not in code
    assert len(s.records("*")) == 4


def test_doctor_fusion_prints_kernels_with_and_without_probes_per_graph():
    out = subprocess.run([sys.executable, "-m", "dynstep", "doctor", "--fusion"], capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "summary probes under Inductor computed inside its kernels: on" in text
    assert "graph" in text and "without probes" in text and "fused" in text and "extern" in text
    rows = [r for line in text.splitlines() for r in [line.split()] if r[:1] and r[0].startswith("forward[")
            and len(r) == 7 and r[2].isdigit()]
    assert {r[1] for r in rows} == {"forward", "backward"}
    for _graph, _phase, kernels, unprobed, added, fused_, extern in (r[:7] for r in rows):
        assert int(kernels) - int(unprobed) == int(added) and int(fused_) > 0 and int(extern) >= 0


def test_which_probes_are_fused_the_flight_recorders_included():
    """Summary-only probes are fused; an owned site (the flight recorder's) with summary + nan is too (its
    NaN/Inf counts go to its sink); a nan check of the sessions', record, print and hand-placed probes are not."""
    from dynstep.core.sites import Site

    def site(actions, owner="", kind="value"):
        return Site(id=1, kind=kind, probe="*", node="n", target="t", module="", source="", source_text="",
                    graph="g", actions=actions, capacity=1, owner=owner)

    assert stats_pass.fusable(site(("summary",))) and stats_pass.fusable(site(("summary",), kind="grad"))
    assert stats_pass.fusable(site(("summary", "nan"), owner="flight"))
    assert not stats_pass.fusable(site(("summary", "nan")))            # the sessions' nan check needs the value
    assert not stats_pass.fusable(site(("summary", "record"), owner="flight"))
    assert not stats_pass.fusable(site(("print",))) and not stats_pass.fusable(site(("summary",), kind="pause"))


def shapes_of_one_value(x):
    a = torch.sin(x)                 # fused: its reductions
    b = a.view(64, -1)               # the same elements: a's statistics, not computed again
    c = b.t()                        # a permutation of them: the same
    d = c * 2                        # new elements: its own reductions
    e = d.reshape(-1)[: 1 << 10]     # reshape (a view here) then a slice: new elements, its own
    return d, e, b


def test_views_and_copies_of_a_probed_value_share_its_statistics(fuse_all, monkeypatch):
    from dynstep.core.sites import SITES

    reports, fuse = [], stats_pass.fuse_summaries
    monkeypatch.setattr(stats_pass, "fuse_summaries", lambda gm: reports.append(fuse(gm)) or reports[-1])
    x = torch.randn(1 << 12)
    x[5], x[77] = math.nan, math.inf
    (d, e, b), code, s = probed_run(shapes_of_one_value, x)
    assert_fused(code)
    hits = {h.node: h for h in s.records("*")}
    shared = {SITES.get(i).node for r in reports for i in r.shared}
    assert shared == {"b", "c", "reshape"}      # d.reshape(-1) shares d's; the slice of it has its own
    for node, value in (("a", b), ("b", b), ("c", b.t()), ("d", d), ("reshape", d), ("e", e)):
        assert_same_stats(hits[node].stats, reference(value), rel=1e-12)
    assert (hits["a"].shape, hits["b"].shape, hits["c"].shape, hits["e"].shape) == ((1 << 12,), (64, 64), (64, 64),
                                                                                  (1 << 10,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_no_node_is_shared_between_two_statistics_of_a_value(dtype):
    """Inductor realizes a pointwise node with two users when its inlined expression is long: a float64
    copy shared by the sum and the sum of squares was written to memory and read back for each deep value
    of a fused chain on an H100 (docs/gpu-validation.md). Each statistic's expression is its own: only the
    value itself (and constants) may have more than one user."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    with FakeTensorMode():
        x.meta["val"] = torch.empty(64, 64, dtype=dtype)
    out = graph.output(None)
    with graph.inserting_before(out):
        stats = stats_pass._statistics(stats_pass._Emitter(graph, out), x)
    graph.output(stats)
    graph.erase_node(out)
    assert len(stats) == (6 if dtype.is_floating_point else 4)
    for node in graph.nodes:
        if node is x or node.op == "output" or node.target is torch.ops.aten.full.default:
            continue
        assert len(node.users) == 1, (node.format_node(), list(node.users))
