"""The last call's graph inputs, kept cheaply so a dump can replay that graph call.

Each instrumented graph's last call keeps its inputs *by reference*, with each tensor's version
counter: nothing is copied while all is well. When a trigger is pending and something is about to
change them (an optimizer step: `freeze()` from its pre-hook), or when the dump is written, the inputs
whose version is unchanged are copied, largest budget first within the memory cap (`inputs` option).

What cannot be replayed exactly, said in the dump (replay.json notes) and by `dynstep flight replay`:
- an input changed in place after the call and before it could be copied (the optimizer stepped before
  the trigger was known, e.g. a spike watched after `optimizer.step()`): its value at the dump is kept,
  flagged `mutated`;
- an input the graph itself changes in place (running statistics, a KV cache): seen after the first
  call, such inputs are copied before every later call (they are small; within the cap), else flagged;
- random numbers: a graph with random ops keeps the CPU generator's state at each call, and the replay
  restores it and runs Inductor with `fallback_random` so eager and compiled draw the same numbers —
  not necessarily the ones the original compiled run drew;
- inputs over the cap, tensor subclasses and non-tensor objects are left out (the replay cannot run).

    keeper = InputKeeper(cap=512 << 20)
    keeper.keep("forward[0/0]", step, args, rng=False); keeper.after_call("forward[0/0]")
    keeper.freeze(["forward[0/0]"]); call = keeper.captured("forward[0/0]")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from .. import _compat


@dataclasses.dataclass
class KeptCall:
    graph: str
    step: int
    call: int
    values: list[Any]
    versions: tuple[int | None, ...]
    copies: dict[int, torch.Tensor]
    rng: torch.Tensor | None = None
    frozen: bool = False


@dataclasses.dataclass(frozen=True)
class CapturedCall:
    """One graph call's inputs as a dump keeps them (tensors as CPU copies)."""

    graph: str
    step: int
    call: int
    tensors: dict[int, torch.Tensor]      # input index -> value
    scalars: dict[int, Any]               # input index -> int, float, bool or None
    mutated: tuple[int, ...]              # changed in place after the call: the value at the dump
    missing: dict[int, str]               # input index -> why it is left out
    rng: torch.Tensor | None
    requires_grad: tuple[bool, ...] = ()  # per input: a parameter or a tensor that needs its gradient


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _plain(t: Any) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided and not t.is_meta


class InputKeeper:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.last: dict[str, KeptCall] = {}
        self.calls: dict[str, int] = {}
        self.self_mutated: dict[str, set[int]] = {}   # inputs each graph changes in place itself
        self.held = 0                                   # bytes of copies held

    def keep(self, graph: str, step: int, args: Sequence[Any], *, rng: bool) -> None:
        if self.cap <= 0:
            return
        call = self.calls.get(graph, 0)
        self.calls[graph] = call + 1
        old = self.last.pop(graph, None)
        if old is not None:
            self.held -= sum(_nbytes(t) for t in old.copies.values())
        values = list(args)
        copies = {i: values[i].detach().clone() for i in self.self_mutated.get(graph, ())
                  if _plain(values[i]) and self.held + _nbytes(values[i]) <= self.cap}
        self.held += sum(_nbytes(t) for t in copies.values())
        self.last[graph] = KeptCall(graph, step, call, values, _versions(values), copies,
                                    torch.get_rng_state() if rng else None)

    def after_call(self, graph: str) -> None:
        """Inputs whose version moved during the call: the graph changes them itself (copied from now on)."""
        kept = self.last.get(graph)
        if kept is None or kept.frozen:
            return
        moved = {i for i, v in enumerate(_versions(kept.values)) if v != kept.versions[i]}
        if moved - self.self_mutated.get(graph, set()):
            self.self_mutated.setdefault(graph, set()).update(moved)

    def freeze(self, graphs: Sequence[str]) -> None:
        """Copy the unchanged inputs of these graphs' last calls now (a trigger is pending and they are
        about to change), within the cap, in that order."""
        for graph in graphs:
            kept = self.last.get(graph)
            if kept is None or kept.frozen:
                continue
            kept.frozen = True
            now = _versions(kept.values)
            for i, value in enumerate(kept.values):
                if i in kept.copies or not _plain(value) or now[i] != kept.versions[i]:
                    continue
                if self.held + _nbytes(value) > self.cap:
                    continue
                kept.copies[i] = value.detach().clone()
                self.held += _nbytes(value)

    def captured(self, graph: str) -> CapturedCall | None:
        """The last call of `graph` as the dump keeps it, or None when it was never kept."""
        kept = self.last.get(graph)
        if kept is None:
            return None
        if not kept.frozen:
            self.freeze([graph])
        now = _versions(kept.values)
        tensors, scalars, missing, mutated = {}, {}, {}, []
        budget = self.cap - self.held
        for i, value in enumerate(kept.values):
            if i in kept.copies:
                tensors[i] = kept.copies[i].detach().to("cpu")
            elif isinstance(value, (bool, int, float)) or value is None:
                scalars[i] = value
            elif not _plain(value):
                missing[i] = f"a {type(value).__name__}, which a dump cannot keep"
            elif now[i] != kept.versions[i] and _nbytes(value) <= budget:
                tensors[i] = value.detach().to("cpu", copy=True)   # its value now, not at the call
                budget -= _nbytes(value)
                mutated.append(i)
            else:
                missing[i] = f"{_nbytes(value)} bytes, over the inputs memory cap ({self.cap} bytes)"
        grads = tuple(bool(getattr(v, "requires_grad", False)) for v in kept.values)
        return CapturedCall(kept.graph, kept.step, kept.call, tensors, scalars, tuple(mutated), missing, kept.rng,
                            grads)


def _versions(values: list[Any]) -> tuple[int | None, ...]:
    return tuple(_compat.tensor_version(v) if isinstance(v, torch.Tensor) else None for v in values)
