"""Where a divergence (or a NaN) starts: a k-ary search over cuts, then one probed segment.

The *cut* after the first p nodes (execution order) holds the values computed before it that
later nodes or the outputs read: if those are clean, nothing before p can have started the
divergence. Probing a value means compiling a copy of the graph with it as an extra output,
and each compile costs seconds, so:

- a search round probes the cuts at `WAYS - 1` evenly spaced points in **one** compile and
  checks them in execution order (one compiled run and one reference prefix per cut, so only
  one cut's values are held at a time, and the outputs are not judged again); the suspect
  segment lies between the last clean cut and the first bad one, a `WAYS`-th of the previous
  one;
- once the segment has at most `SEGMENT` nodes, one compile probes all of them and their
  inputs; each is rerun eagerly and in float64 on its *compiled* inputs, and the first whose
  own error diverges is named. That compile is both the last search step and the
  confirmation. The same step over the whole prefix is the dense scan the engine falls back on
  when the search was misled.

    where = narrow(differ, differ.diverges, "divergence")    # Narrowed(lo=4, hi=6, runs=(...))
    found = pin_divergence(differ, where.lo, where.hi, "confirming")   # Pinned(found=NodeDiff|None, run)
    origin = pin_nonfinite(differ, lo, hi)                   # NanOrigin | None

For a graph of n nodes that is `2 + rounds(n)` compiles with the outputs-only one, against
`2 + ceil(log2 n)` for a binary search with a separate confirmation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from .judge import nonfinite
from .probed import ProbedRun, is_tensorish
from .report import NanOrigin, NodeDiff

WAYS = 4      # segments per round: WAYS - 1 cuts probed in one compile
SEGMENT = 4   # a segment of at most this many nodes is settled by probing all of it

# (probed run, the values of one cut) -> is one of them bad
Test = Callable[[ProbedRun, Sequence[torch.fx.Node]], bool]


@dataclasses.dataclass(frozen=True)
class Narrowed:
    """The divergence starts in nodes lo..hi-1: cut(lo) is clean (or empty), cut(hi) is bad."""

    lo: int
    hi: int
    runs: tuple[ProbedRun, ...]   # the probed copies compiled on the way (to judge their outputs later)


@dataclasses.dataclass(frozen=True)
class Pinned:
    """What probing one segment found, and the run (to judge its outputs when nothing was)."""

    found: NodeDiff | None
    run: ProbedRun
    nan: NanOrigin | None = None   # set when the node found produced NaN/Inf
    fed: dict | None = None        # the found node's inputs as the compiled program fed them (for its root cause)


def cut_points(lo: int, hi: int) -> list[int]:
    """Up to WAYS - 1 points strictly between lo and hi, evenly spaced."""
    return sorted({lo + (hi - lo) * i // WAYS for i in range(1, WAYS)} - {lo, hi})


def rounds(n: int) -> int:
    """Search rounds a graph of n nodes needs at most before its final segment."""
    count = 0
    while n > SEGMENT:
        points = [0, *cut_points(0, n), n]
        n = max(b - a for a, b in zip(points, points[1:]))
        count += 1
    return count


def narrow(differ: Any, test: Test, label: str) -> Narrowed:
    """Shrink the segment where the outputs' divergence starts to at most SEGMENT nodes."""
    lo, hi, runs = 0, len(differ.order), []
    while hi - lo > SEGMENT:
        cuts = [(p, differ.cut(p)) for p in cut_points(lo, hi)]
        probes = list(dict.fromkeys(v for _, values in cuts for v in values))
        if not probes:  # nothing computed before these points is read after them
            lo = cuts[-1][0]
            continue
        differ.tick(f"{label}: probing {len(probes)} value(s) at {len(cuts)} cuts in nodes "
                    f"{lo}..{hi - 1} of {len(differ.order)}")
        runs.append(differ.compile(probes))
        lo, hi = _round(runs[-1], cuts, test, lo, hi)
    return Narrowed(lo, hi, tuple(runs))


def _round(run: ProbedRun, cuts: list[tuple[int, list[torch.fx.Node]]], test: Test, lo: int,
           hi: int) -> tuple[int, int]:
    """Check the cuts of one compile in execution order; stop at the first bad one."""
    for p, values in cuts:
        if values and test(run, values):
            return lo, p
        lo = p
    return lo, hi


def segment(differ: Any, lo: int, hi: int) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
    """The tensor-valued nodes lo..hi-1, and every value to probe: those and their inputs."""
    nodes = [n for n in differ.order[lo:hi] if is_tensorish(n)]
    feeds = [a for n in nodes for a in n.all_input_nodes if a in differ.pos and is_tensorish(a)]
    return nodes, sorted(set(nodes) | set(feeds), key=differ.pos.__getitem__)


def pin_divergence(differ: Any, lo: int, hi: int, label: str) -> Pinned:
    """Probe nodes lo..hi-1 and their inputs in one compile; the first node whose own error
    (rerun on its compiled inputs) and whose value (against the reference) both diverge."""
    nodes, probes = segment(differ, lo, hi)
    differ.tick(f"{label}: probing nodes {lo}..{hi - 1} and their inputs ({len(probes)} values)")
    run = differ.compile(probes)
    _, compiled = run(differ.inputs, outputs=False)
    for i, node in enumerate(nodes):
        own = differ.local(node, compiled)
        if own is None or not own.diverged:
            continue
        fed = {a: compiled[a] for a in node.all_input_nodes if a in compiled}
        _drop_unneeded(compiled, node, nodes[i + 1:])
        judged = differ.judge_run([], {node: compiled[node]}).values.get(node)
        if judged is not None and judged.diverged:
            found = dataclasses.replace(judged, own=True, kernel=differ.kernel(node))
            nan = differ.nan_origin(node, compiled[node]) if found.new_nonfinite else None
            return Pinned(found, run, nan, fed)
    return Pinned(None, run)


def _drop_unneeded(compiled: dict[torch.fx.Node, Any], node: torch.fx.Node, later: Sequence[torch.fx.Node]) -> None:
    """Before a reference pass, drop the compiled values no later node of the segment reads."""
    needed = {node, *later, *(a for n in later for a in n.all_input_nodes)}
    for dead in [k for k in compiled if k not in needed]:
        del compiled[dead]


def pin_nonfinite(differ: Any, lo: int, hi: int) -> NanOrigin | None:
    """Probe nodes lo..hi-1 and their inputs in one compile; the first node producing NaN/Inf
    from inputs that hold none."""
    nodes, probes = segment(differ, lo, hi)
    differ.tick(f"nan origin: probing nodes {lo}..{hi - 1} and their inputs ({len(probes)} values)")
    _, compiled = differ.compile(probes)(differ.inputs, outputs=False)
    for node in nodes:
        value = compiled.get(node)
        if value is not None and nonfinite(value) and not nonfinite(differ.inputs_of(node, compiled)):
            return differ.nan_origin(node, value)
    return None
