"""What a step is for the flight recorder, and which step a hit belongs to.

A step is one optimizer step, seen through torch.optim's global step hook
(`torch.optim.optimizer.register_optimizer_step_post_hook`): every hit after one `optimizer.step()` and up
to the end of the next belongs to the next step. Until the first optimizer step (an inference loop, or a
loop that steps no `torch.optim` optimizer), a step is one top-level compiled call: each call of a graph
of the first frame the flight recorder instrumented (Dynamo's frame id in the compile id, `forward[0/1]`
is frame 0, recompiled) starts one; when an optimizer first steps, the calls before it become step 0
(gradient accumulation's micro-batches are one step). Several optimizers stepped in one iteration (a GAN)
make one step: an optimizer step with no compiled call since the last step boundary is not a new step.

A step's hits are told apart by their order `seq` (the native ring's global hit counter): the clock
keeps the first `seq` of each of the last K + 2 steps.

    clock = StepClock(keep=66)
    clock.call("forward[0/0]")          # True when this call starts a new step (call rule)
    clock.optimizer_step()              # True when it ended a step
    clock.step_of(seq)                  # the step a hit belongs to (-1: older than the clock remembers)
"""

from __future__ import annotations

import bisect
import collections
import re

from ..probe import runtime

_FRAME = re.compile(r"\[(\d+)/\d+\]$")


def frame_of(graph: str) -> str:
    """Dynamo's frame id in a graph id ("forward[3/1]" -> "3"); "" when it has none."""
    match = _FRAME.search(graph)
    return match.group(1) if match else graph


class StepClock:
    def __init__(self, keep: int) -> None:
        self.step = 0
        self.rule = "call"                   # "optimizer" once an optimizer has stepped
        self.entry: str | None = None        # the frame whose calls start steps (call rule)
        self.calls = 0                       # compiled calls since the last boundary
        self.per_graph: collections.Counter[str] = collections.Counter()   # this step's calls per graph
        self.most: dict[str, int] = {}       # the most calls of a graph in one step so far
        self.total: collections.Counter[str] = collections.Counter()   # calls under the call rule
        self.renumbered = False              # the first optimizer step made the earlier steps step 0
        self._starts: collections.deque[tuple[int, int]] = collections.deque([(0, 0)], maxlen=max(2, keep))
        self._seqs: list[int] | None = None   # the starts' seqs, for step_of (made again after a change)

    def starts_step(self, graph: str) -> bool:
        """Whether a call of `graph` now would start a step (what `call` is about to decide)."""
        frame = frame_of(graph)
        return self.rule == "call" and frame == (self.entry or frame) and self.calls > 0

    def call(self, graph: str) -> bool:
        """A compiled graph is about to run; under the call rule a call of the entry frame starts a step."""
        started = self.starts_step(graph)
        if self.entry is None:
            self.entry = frame_of(graph)
        if started:
            self._advance()
        self.calls += 1
        self.per_graph[graph] += 1
        if self.rule == "call":
            self.total[graph] += 1
        return started

    def optimizer_step(self) -> bool:
        """An optimizer stepped: the end of a step when a compiled call happened since the last one.

        The first one switches the rule: every call before it was one step, step 0 (the micro-batches of
        gradient accumulation, not steps of their own), so the steps counted so far are numbered 0 again."""
        if self.rule == "call":
            self.rule = "optimizer"
            if self.step > 0:
                self._restart()
        if self.calls == 0:
            return False
        self._advance()
        return True

    def _restart(self) -> None:
        self.step = 0
        self.per_graph = collections.Counter(self.total)
        self.calls = sum(self.total.values())
        self.renumbered = True
        self._starts.clear()
        self._starts.append((0, 0))
        self._seqs = None

    def _advance(self) -> None:
        for graph, n in self.per_graph.items():
            if n > self.most.get(graph, 0):
                self.most[graph] = n
        self.per_graph.clear()
        self.calls = 0
        self.step += 1
        self._starts.append((self.step, runtime.next_seq()))
        self._seqs = None

    def step_of(self, seq: int) -> int:
        """The step of the hit with order `seq`; -1 when it is older than the steps remembered."""
        if self._seqs is None:
            self._seqs = [s for _, s in self._starts]
        i = bisect.bisect_right(self._seqs, seq) - 1
        if i < 0:
            return -1
        return self._starts[i][0]

    def starts(self) -> tuple[tuple[int, int], ...]:
        return tuple(self._starts)

    def calls_per_step(self, graph: str) -> int:
        """The most calls of `graph` seen in one step (this one included), at least 1."""
        return max(1, self.most.get(graph, 0), self.per_graph.get(graph, 0))
