"""`dynstep flight replay DUMP`: re-run the graph call a dump kept, every node probed, eager beside it.

The answer to "was it the data or the compiler": the graph (as Dynamo gave it, rebuilt with the same node
names, modules and lines) runs on the kept inputs three ways — eagerly, compiled with every node probed
(the inner compiler and mode of the original run; its statistics are written as a recording), and
through the eager-vs-compiled diff (`dynstep.eagerdiff`: first divergence, where NaN/Inf first appears in
eager and in compiled). The trigger's node is then compared: does the replay reproduce the dumped value,
and does eager make it too (the inputs: data or weights) or only compiled (the compiler)?

A gradient (a trigger in the backward phase) is replayed through the diff's gradient mode, whose
cotangent is its own, not the loss's: the forward values are the call's, the gradients are not.

    result = replay("dynstep-flight/20261125-101500-rank0-nonfinite")      # dynstep.flight.replay
    result.reproduced, result.verdict, result.diff.first_divergence
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from copy import deepcopy
from pathlib import Path
from typing import Any

import torch
import torch.fx

from .. import _compat
from ..core.errors import StorageError
from ..core.records import Stats
from ..probe.stats import stats_of
from ..recording.flight_facts import Trigger
from .graphio import graph_from_json, input_name
from .replayfile import ReplayCall, read_replay


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    dump: str
    graph: str
    step: int
    trigger: Trigger | None
    node: str                  # the node compared ("" when the trigger names none)
    dumped: Stats | None       # its statistics in the dump, at the kept call's step
    compiled: Stats | None     # ... in the replay, compiled with every node probed
    eager: Stats | None        # ... eagerly
    reproduced: bool | None    # None: nothing to compare
    verdict: str
    diff: Any                  # dynstep.eagerdiff.DiffReport
    recording: str             # the probed replay's recording
    notes: tuple[str, ...]
    nonfinite_inputs: tuple[str, ...] = ()   # graph inputs already holding NaN/Inf, as the user names them


def replay(dump: str | Path, *, out: str | Path | None = None) -> ReplayResult:
    from ..recording.reader import load

    dump = Path(dump)
    rec = load(dump, tensors=False)
    if rec.trigger is None:
        raise StorageError(f"{dump}: not a flight recorder's dump (no flight.json)")
    call = read_replay(dump)
    if not call.inner:
        raise StorageError(f"{dump}: the graph ran under a backend given as a callable; a replay needs its name")
    gm = graph_from_json(call.nodes, {f"attr:{k}": v for k, v in call.attrs.items()})
    trigger = rec.trigger
    node = trigger.node if trigger.graph == call.graph else ""
    phase = trigger.phase if node else "forward"
    eager = _eager(gm, call, node)
    recording = Path(out) if out is not None else dump.parent / f"{dump.name}.replay"
    compiled = _probed(gm, call, node, phase, recording)
    diff = _diff(gm, call, phase)
    dumped = _dumped(rec, trigger, node, phase, call.step)
    reproduced = _same(dumped, compiled) if dumped is not None and compiled is not None else None
    bad_inputs = _nonfinite_inputs(gm, call)
    verdict = _verdict(trigger, node, phase, reproduced, eager, compiled, diff)
    if bad_inputs and not verdict.startswith("not reproduced"):
        verdict += f"; the inputs already hold NaN/Inf: {', '.join(bad_inputs[:4])}"
    return ReplayResult(str(dump), call.graph, call.step, trigger, node, dumped, compiled, eager, reproduced, verdict,
                        diff, str(recording), call.notes, bad_inputs)


def _nonfinite_inputs(gm: torch.fx.GraphModule, call: ReplayCall) -> tuple[str, ...]:
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(input_name(name) for name, value in zip(names, call.inputs)
                 if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all())


@contextlib.contextmanager
def _rng(call: ReplayCall):
    if call.rng is None:
        yield
        return
    saved = torch.get_rng_state()
    torch.set_rng_state(call.rng)
    try:
        with _compat.inductor_fallback_random():
            yield
    finally:
        torch.set_rng_state(saved)


def _eager(gm: torch.fx.GraphModule, call: ReplayCall, node: str) -> Stats | None:
    """Run eagerly, node by node: every node's example value (meta, for the passes) and `node`'s stats."""
    found: dict[str, Stats] = {}

    class Run(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            value = super().run_node(n)
            n.meta["example_value"] = _meta(value)
            if n.name == node and isinstance(value, torch.Tensor):
                found[node] = stats_of(value)
            return value

    with _rng(call), torch.enable_grad():
        Run(gm).run(*call.inputs)
    return found.get(node)


def _meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        meta = value.detach().to("meta")
        return meta.requires_grad_(True) if value.requires_grad and meta.is_floating_point() else meta
    if isinstance(value, (tuple, list)):
        return type(value)(_meta(v) for v in value)
    return value


def _probed(gm: torch.fx.GraphModule, call: ReplayCall, node: str, phase: str, recording: Path) -> Stats | None:
    """Compile a copy with every node probed (the original inner compiler), run it once, record it."""
    from ..backends.superstep import superstep
    from ..probe.sessions import session

    copy = torch.fx.GraphModule(gm, deepcopy(gm.graph))   # the probe pass changes the graph it is given
    grads = phase == "backward"
    with _rng(call), torch.enable_grad() if grads else torch.no_grad():
        compiled = superstep(probe=["*"], inner=call.inner, grads=grads, **({"mode": call.mode} if call.mode else {}))(
            copy, list(call.inputs))
        with session(path=recording) as s:
            out = compiled(*call.inputs)
            if grads:
                _backward(out)
    kind = "grad" if grads else "value"
    hits = [h for h in s.records(kind=kind) if h.node == node]
    return hits[0].stats if hits else None


def _backward(out: Any) -> None:
    leaves = [t for t in _compat.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    if leaves:
        torch.autograd.backward(leaves, [torch.ones_like(t) for t in leaves])


def _diff(gm: torch.fx.GraphModule, call: ReplayCall, phase: str) -> Any:
    from ..eagerdiff.engine import DiffConfig, diff_graph
    from ..eagerdiff.report import DiffReport

    cfg = DiffConfig(backend=call.inner, mode=call.mode, training=phase == "backward", ladder=False)
    with _rng(call):
        result = diff_graph(gm, list(call.inputs), cfg, graph=call.graph, call=call.call)
    return DiffReport(call.inner, (result,))


def _dumped(rec: Any, trigger: Trigger, node: str, phase: str, step: int) -> Stats | None:
    kind = "grad" if phase == "backward" else "value"
    hits = [s for s in rec.all() if s.node == node and s.kind == kind and s.graph == trigger.graph and s.step == step]
    return hits[-1].stats if hits else None


def _same(a: Stats, b: Stats) -> bool:
    if (a.nan or a.inf or b.nan or b.inf) and (a.nan, a.inf) != (b.nan, b.inf):
        return False
    return all(_close(getattr(a, k), getattr(b, k)) for k in ("absmax", "mean", "std"))


def _close(x: float, y: float) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-6)


def _verdict(trigger: Trigger, node: str, phase: str, reproduced: bool | None, eager: Stats | None,
             compiled: Stats | None, diff: Any) -> str:
    first = diff.first_divergence
    diverges = f"compiled leaves eager at {first.where}" if first is not None else ""
    if not node:
        return f"the trigger ({trigger.kind}) names no node of this graph; " + (
            f"{diverges}: the compiler" if diverges else "compiled agrees with eager on every node checked")
    if reproduced is False:
        return (f"not reproduced: {node} differs from the dumped value (inputs changed in place before they were "
                "kept, random numbers, or a value the replayed call does not see)")
    bad = lambda s: s is not None and (s.nan or s.inf)  # noqa: E731
    if phase == "forward" and bad(compiled) and bad(eager):
        return f"the inputs (data or weights): eager makes the same NaN/Inf at {node}, not only the compiler"
    if phase == "forward" and bad(compiled):
        return f"the compiler: eager is finite at {node}, compiled is not"
    if diverges:
        return f"the compiler: {diverges}"
    return f"the inputs (data or weights): eager and compiled agree at {node} and on every node checked"
