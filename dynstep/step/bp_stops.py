"""Where `dynstep.breakpoint()`'s two stops go: the compile-time stop and the runtime stop.

Compile-time stops are answered by the same front end as runtime stops (the scripted commands'
shared queue, the terminal REPL, pdb, an editor), with their own commands
(`dynstep.step.compile_stop`). Runtime stops go into the runtime stepper, so `p`, `set`, `s`, `c`,
`w` work there. When no stepper configuration exists yet (plain `torch.compile`, no superstep),
it is read from DYNSTEP_FRONTEND / DYNSTEP_COMMANDS or `dynstep.configure(...)`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import torch

from ..core import wiring
from ..core.errors import OptionsError
from ..core.events import CompileViewShown, Info, Warning_, emit
from ..core.options import parse_ranks
from ..core.stop import StepConfig
from ..core.sites import SITES, Site
from .compile_stop import CONTEXTS, CompileStop, CompileStopCommands, Scope
from .rank_commands import job_pause
from .stepper import STEPPER

COMPILE_PROMPT = "(dynstep compile) "
_sites: dict[tuple[int, str], Site] = {}
_lock = threading.Lock()


def configure(*, frontend: str | None = None, commands: str | None = None, step: bool = False) -> None:
    """Choose the front end for breakpoints and pauses: ``dynstep.configure(commands="locals; c; p h; c")``."""
    STEPPER.configure(StepConfig(frontend, commands, step))


def _stepper():
    if STEPPER.config is None:
        STEPPER.configure(StepConfig(os.environ.get("DYNSTEP_FRONTEND") or None,
                                     os.environ.get("DYNSTEP_COMMANDS") or None))
    return STEPPER


def present_compile_stop(stop: CompileStop, fakes: dict[str, Any], scope: Scope | None = None) -> None:
    """Let the front end answer a compile-time stop. In a distributed job only the ranks that may pause
    stop (the others compile on), one at a time at the launcher's terminal; `q` ends every rank."""
    stepper = _stepper()
    coord = _job(stepper)
    if coord is not None and not coord.may_pause():
        emit(Info(f"dynstep: rank {coord.resolve().rank} compiles on past the compile-time stop at {stop.location} "
                  "(not one of the ranks that pause: --ranks, DYNSTEP_RANKS)"))
        return
    frontend = stepper.active_frontend()
    if frontend is None:
        return
    info = {"node": f"compile-time stop {stop.location}", "graph": f"compile {stop.compile_id}", "source": stop.location}
    with job_pause(coord, info, None, turn=frontend.shares_terminal, follow=False):
        _answer_compile_stop(stepper, frontend, stop, fakes, scope)   # `step --all` does not reach a compile-time stop


def _answer_compile_stop(stepper: Any, frontend: Any, stop: CompileStop, fakes: dict[str, Any],
                         scope: Scope | None) -> None:
    cmds = CompileStopCommands(stop, fakes, scope)
    emit(CompileViewShown(cmds.header()))
    if not frontend.reads_lines:   # pdb and other debuggers: a frame holding what `p` names there
        with scope.quiet() if scope is not None else contextlib.nullcontext():   # looking adds no guard
            frontend.compile_stop(stop, {**fakes, **(scope.names if scope is not None else {})})
        return
    while True:
        line = frontend.read(COMPILE_PROMPT)
        if line is None:
            stepper.detach("dynstep: no more commands at the compile-time stop; continuing to the end")
            return
        if cmds.execute(line):
            return


def _job(stepper: Any) -> Any:
    """The distributed job's coordinator, made now when no superstep compile has plugged one in yet
    (a compile-time stop comes before its graph reaches the backend); None in a single process."""
    if stepper.coordinator is None:
        try:
            stepper.coordinator = wiring.make_coordinator(parse_ranks(os.environ.get("DYNSTEP_RANKS") or None))
        except OptionsError:
            return None      # the backend says what is wrong with it, at this graph's compile
    coord = stepper.coordinator
    try:
        return None if coord is None or coord.alone else coord
    except OptionsError as exc:       # ranks this job does not have
        emit(Warning_(f"compile-time stop: {exc}"))
        return None


def runtime_stop(bp: Any, values: dict[str, torch.Tensor], *, writable_names: set[str]) -> None:
    """Stop in the runtime stepper at a breakpoint's line, with its real tensor locals."""
    stepper = _stepper()
    if stepper.detached:
        return
    site = _site_for(bp, values)
    stepper.hits[site.id] += 1
    value = values[site.user_name] if site.user_name else torch.empty(0)
    inputs = {k: v for k, v in values.items() if k != site.user_name}
    stepper.stop(value, site, inputs, reason="breakpoint", writable=site.user_name in writable_names,
                 writable_inputs=frozenset(writable_names))


def _site_for(bp: Any, values: dict[str, torch.Tensor]) -> Site:
    key = (bp.id, bp.compile_id) if bp.id else (0, f"{bp.file}:{bp.line}")
    with _lock:
        site = _sites.get(key)
        if site is None:
            where = f"{os.path.basename(bp.file)}:{bp.line}"
            suffix = f"#{bp.occurrence}" if bp.occurrence else ""
            graph = f"{bp.function}[{bp.compile_id}]" if bp.compile_id != "eager" else f"{bp.function} (eager)"
            shown = next(reversed(values), "")   # the last local assigned: what `value` is bound to
            site = SITES.add(kind="pause", probe="breakpoint", node=f"breakpoint@{bp.line}{suffix}",
                             target="dynstep.breakpoint", module="", source=where, source_text=bp.code,
                             graph=graph, actions=("breakpoint",), capacity=1,
                             inputs=tuple(n for n in values if n != shown), user_name=shown,
                             frames=(f"{bp.file}:{bp.line}",))
            _sites[key] = site
            if bp.id:
                CONTEXTS.link(site.id, bp.id)
    return site
