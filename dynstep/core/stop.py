"""A stop in progress at a node of a compiled graph: what every stepper room and front end names.

Here, below the stepper, so that its commands (`dynstep.step.commands`, `dynstep.mixed.commands`),
the DAP's views and the front ends name it without importing the stepper."""

from __future__ import annotations

import dataclasses

import torch

from .sites import Site


@dataclasses.dataclass
class Stop:
    """The stop in progress: the live tensor (the op's own buffer) and what surrounds it."""

    site: Site
    value: torch.Tensor
    inputs: dict[str, torch.Tensor]
    reason: str
    call: int
    writable: bool
    stack: tuple[str, ...]
    note: str = ""
    writable_inputs: frozenset[str] = frozenset()   # inputs `set NAME = ...` may overwrite (breakpoints)

    def names(self) -> tuple[str, ...]:
        """Every name bound to the stopped value itself."""
        return tuple(dict.fromkeys(n for n in ("value", self.site.node, self.site.user_name) if n))


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """Who answers the stops of graphs compiled with some options (`Stepper.configure`): the front
    end kind, scripted commands, `step=True` (stop at the first node), and whether the commands came
    from a torch.compile call's options (`per_call`: each such call runs them from the start)."""

    frontend: str | None = None
    commands: str | None = None
    step: bool = False
    per_call: bool = False
