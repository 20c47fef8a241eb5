"""The stepper's commands for distributed jobs, and its side of the coordinator plug-in.

The stepper never imports `dynstep.jobs`: the superstep backend puts a coordinator into
`Stepper.coordinator` (None in a single process), and these commands use what it offers:

    ranks               where every rank is (running, waiting, paused at which node)
    p@1 value.mean()    any of print/set/where/graph/record/watch, answered by rank 1 at this stop point
    step --all          (in commands.py) every paused rank steps to its next node, in lockstep
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from ..core.commands import CommandSet
from ..core.errors import Abort
from ..core.events import CommandFailed, Info, emit, use_sink

if TYPE_CHECKING:
    from ..core.sites import Site
    from ..core.stop import Stop

FORWARDED = frozenset({"print", "set", "where", "graph", "record", "help", "watch"})


class RankState(Protocol):
    """What these commands use of the stepper they hold."""

    coordinator: "Coordinator | None"
    current: "Stop | None"


class Coordinator(Protocol):
    """What dynstep.jobs.coordinator.Coordinator offers the stepper (docs/distributed.md)."""

    def stop_point(self, site: "Site", pause: Callable[[], bool], serve: Callable[[str], list]) -> None: ...
    def agree(self, want: bool, fine: bool = True) -> bool: ...
    def end_call(self) -> None: ...
    def may_pause(self) -> bool: ...
    @property
    def alone(self) -> bool: ...
    def resolve(self) -> Any: ...
    def set_ranks(self, ranks: Any) -> None: ...
    def enter_pause(self, info: dict[str, str], serve: Callable[[str], list], turn: bool = True,
                    follow: bool = True) -> str | None: ...
    def leave_pause(self) -> None: ...
    def idle(self) -> None: ...
    def quit_all(self, reason: str) -> BaseException: ...
    def forward(self, rank: int, line: str) -> list[object]: ...
    def step_all(self) -> None: ...
    def where(self) -> list[str]: ...


@contextlib.contextmanager
def job_pause(coord: Coordinator | None, info: dict[str, str], serve: Callable[[str], list] | None,
              turn: bool, follow: bool = True) -> Iterator[str | None]:
    """A stop of this rank in a distributed job (nothing in one process): marked paused, the terminal
    turn taken when `turn`, `q` (Abort) ending every rank. Yields the command another rank's
    `step --all` asks for instead of the front end (`follow`: a stop it can reach), or None."""
    auto = coord.enter_pause(info, serve, turn=turn, follow=follow) if coord is not None else None  # type: ignore
    try:
        yield auto
    except Abort as exc:
        if coord is None:
            raise
        raise coord.quit_all(str(exc)) from None
    finally:
        if coord is not None:
            coord.leave_pause()


class RankCommands(CommandSet):
    stepper: "RankState"

    def execute(self, line: str) -> bool:
        """`cmd@RANK args` goes to another rank; everything else is this rank's own command."""
        name, _, arg = line.strip().partition(" ")
        if "@" in name and not name.startswith("@"):
            self._forward(name, arg)
            return False
        return super().execute(line)

    def _forward(self, name: str, arg: str) -> None:
        command, _, target = name.partition("@")
        full = self.aliases.get(command, command)
        line = f"{name} {arg}".strip()
        if full not in FORWARDED:
            emit(CommandFailed(line, f"only {', '.join(sorted(FORWARDED))} can be sent to another rank"))
            return
        coordinator = self.stepper.coordinator
        if coordinator is None or not target.isdigit():
            why = "this is not a distributed job" if coordinator is None else f"{target!r} is not a rank number"
            emit(CommandFailed(line, f"{why}; use {command}@RANK, e.g. p@1 value.mean()"))
            return
        try:
            answer = coordinator.forward(int(target), f"{command} {arg}".strip())
        except (ValueError, TimeoutError) as exc:
            emit(CommandFailed(line, str(exc)))
            return
        emit(Info(f"[rank {target}]"))
        for event in answer:
            emit(event)

    def cmd_ranks(self, arg: str) -> None:
        """ranks: where every rank of a distributed job is (running, waiting, paused at which node)."""
        if self.stepper.coordinator is None:
            emit(Info("ranks: this is a single process (no distributed job)"))
            return
        for text in self.stepper.coordinator.where():
            emit(Info(text))

    def serve(self, line: str, make_stop: Callable[[], "Stop"]) -> list[Any]:
        """A command another rank sent here, run with this stop point bound; the events it emitted."""
        events: list[Any] = []
        name = line.partition(" ")[0]
        if self.aliases.get(name, name) not in FORWARDED:
            return [CommandFailed(line, f"only {', '.join(sorted(FORWARDED))} can be sent to another rank")]
        saved = self.stepper.current
        self.stepper.current = saved or make_stop()
        try:
            with use_sink(events.append):
                super().execute(line)
        finally:
            self.stepper.current = saved
        return events
