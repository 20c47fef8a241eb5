"""Whether probes changed Inductor's fusion: the kernels of every probed partitioned graph, and, when
asked (DYNSTEP_KERNEL_COUNTS=1, `dynstep doctor`), of the same graph compiled once more without its
probes in the same run. Each graph's count goes into the compile log as a `KernelCount`, so
recordings keep it and `dynstep report` shows it.

    with measure(): ...                                        # or DYNSTEP_KERNEL_COUNTS=1
    counter = KernelCounter("forward[0/0]")
    with counter.around(gm, is_backward, fused=3) as slot:     # around Inductor's compile of gm
        slot.compiled = compile_fx_inner(gm, ...)
    counter.counts                                             # [KernelCount(...)]
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch.fx

from dynstep import _compat
from dynstep.core.options import switched_on
from dynstep.ops import schema as ops
from dynstep.recording.compile_log import COMPILE_LOG
from dynstep.recording.facts import KernelCount

log = logging.getLogger("dynstep")


_forced = 0


def measuring() -> bool:
    """Compile every probed graph a second time without probes, to count what the probes added."""
    return _forced > 0 or switched_on("DYNSTEP_KERNEL_COUNTS")


@contextlib.contextmanager
def measure() -> Iterator[None]:
    """Measure inside the block whatever DYNSTEP_KERNEL_COUNTS says (`dynstep doctor --fusion`)."""
    global _forced
    _forced += 1
    try:
        yield
    finally:
        _forced -= 1


@dataclasses.dataclass
class Slot:
    """Filled by the compile hook: what Inductor returned, and how to compile another graph the same way."""

    compiled: Any = None
    compile_other: Callable[[torch.fx.GraphModule], Any] | None = None


class KernelCounter:
    def __init__(self, graph_id: str) -> None:
        self.graph_id = graph_id
        self.counts: list[KernelCount] = []

    @contextlib.contextmanager
    def around(self, gm: torch.fx.GraphModule, is_backward: bool, *, fused: int) -> Iterator[Slot]:
        slot = Slot()
        bare = without_probes(gm) if measuring() and any(_calls_dynstep(n) for n in gm.graph.nodes) else None
        yield slot
        unprobed = -1
        if bare is not None and slot.compile_other is not None:
            unprobed = _count(slot.compile_other(bare))
        extern = sum(1 for n in gm.graph.nodes if probe_value(n) is not None)
        if not (fused or extern):   # a graph the selectors left without probes: nothing to say
            return
        count = KernelCount(graph=self.graph_id, phase="backward" if is_backward else "forward",
                            kernels=_count(slot.compiled), unprobed=unprobed, fused=fused, extern=extern)
        self.counts.append(count)
        COMPILE_LOG.add(count)
        log.debug("dynstep: %s", count)


def _count(compiled: Any) -> int:
    n = _compat.kernel_count(compiled)
    return -1 if n is None else n


def probe_value(node: torch.fx.Node) -> torch.fx.Node | None:
    """The value a dynstep probe call hands over (plain or with an effect token), else None."""
    if node.op != "call_function":
        return None
    if node.target is ops.probe:
        return node.args[0]
    if node.target is _compat.with_effects_op() and node.args[1] is ops.probe:
        return node.args[2]
    return None


def _calls_dynstep(node: torch.fx.Node) -> bool:
    return probe_value(node) is not None or (node.op == "call_function" and (
        node.target is ops.publish or node.target is _compat.with_effects_op() and node.args[1] is ops.publish))


def without_probes(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of a partitioned graph with every probe and publish call gone (and what only they used)."""
    graph = copy.deepcopy(gm.graph)
    with_effects = _compat.with_effects_op()
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in (ops.probe, ops.publish):
            graph.erase_node(node)
        elif node.target is with_effects and node.args[1] in (ops.probe, ops.publish):
            for user in list(node.users):
                if user.target is operator.getitem:
                    user.replace_all_uses_with(node.args[0])
                    graph.erase_node(user)
            graph.erase_node(node)
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph)
