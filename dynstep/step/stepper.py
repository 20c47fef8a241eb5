"""The stepper: what happens when a `dynstep::pause` op runs, and the state between stops.

The engine never prints. At a stop it emits a `Stopped` event and hands control to a front end
(whatever the composition root installed: terminal REPL, scripted commands, pdb, an editor),
which feeds command lines back to `Stepper.execute`. The commands are in
`dynstep.step.commands` (``cmd_<name>``, docstring = help; aliases ``s``, ``p``, ``cl``).

    STEPPER.execute("p value.mean()")      # at a stop: emits Evaluated(...)
    STEPPER.execute("s")                   # True: resume, stop after the next node

Modes between stops: ``run`` (stop only at pause sites and breakpoints), ``step`` (stop at the
next stop point of any graph), ``next`` (stop at the next pause site of the current graph, or at
the first stop point of another graph), ``out`` (stop at the first stop point of the next graph
call: another graph, or this one called again).

Hooks for front ends that do not own the terminal (an editor through `dynstep.dap`):
`interrupt()` stops at the next stop point (reason "interrupt"), `set_breaks(owner, ids)` adds
breakpoints kept apart from the REPL's `break`, `stop_points = True` asks superstep for stop
points in every graph compiled from then on, and a front end with a `decide(stepper, stop)`
method may decline a stop or rename its reason (conditions, logpoints) before it is shown.
"""

from __future__ import annotations

import collections
import math
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .. import _compat
from ..core import commands as commandset
from ..core import wiring
from ..core.events import Info, Stopped, emit
from ..core.sites import SITES, Site
from ..core.stop import StepConfig, Stop
from ..core.wiring import Frontend
from ..recording.compile_log import COMPILE_LOG
from .commands import StepperCommands
from .rank_commands import Coordinator, job_pause
from .values import tensor_view, user_stack


class Stepper:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.commands = StepperCommands(self)   # the REPL's commands, holding this stepper
        self.reset()

    def reset(self) -> None:
        """Forget front end, breakpoints, watches and mode (tests; a new `dynstep run`)."""
        self.mode = "run"
        self.next_graph = ""
        self.out_from: tuple[str, int] = ("", 0)   # (graph, site id) where `out` started
        self.interrupted = False
        self.stop_points = False
        self.detached = False
        self.frontend: Frontend | None = None
        self.config: StepConfig | None = None
        self.owner: weakref.ref[Any] | None = None   # the torch.compile call the script runs for
        self.breakpoints: dict[str, set[int]] = {}
        self.external_breaks: dict[str, frozenset[int]] = {}
        self.break_ids: set[int] = set()
        self.disabled: set[str] = set()
        self.watches: list[str] = []
        self.user_vars: dict[str, Any] = {}
        self.hits: collections.Counter[int] = collections.Counter()
        self.current: Stop | None = None
        self.nan_stopped = False
        self.coordinator: Coordinator | None = None   # a distributed job's lockstep (plugged in by superstep)

    @property
    def per_call(self) -> bool:
        """The scripted commands came from a torch.compile call's options."""
        return self.config is not None and self.config.per_call

    def configure(self, config: StepConfig) -> None:
        """Called by the pause pass for each graph; a new front-end configuration starts a new script.

        `per_call`: the commands came from a torch.compile call's options; each such call runs them
        from the start (a second torch.compile with the same commands, after torch._dynamo.reset() or
        in a loop over models: follow_call), the graphs and calls of one compiled function share them.
        Commands from the environment (`dynstep run --commands`) are one script for the run."""
        if config == self.config:
            return
        self.config, self.frontend, self.detached = config, None, False
        self.owner = None
        if config.step:
            self.mode = "step"

    def follow_call(self) -> None:
        """A graph of another torch.compile call than the script's is running: its own script, from
        the start (Dynamo may run a graph compiled for an earlier call with equal options)."""
        if not self.per_call:
            return
        current = _compat.running_compile()
        if current is None or (self.owner is not None and self.owner() is current):
            return
        if self.owner is not None:   # (a dead reference: that call is gone, this is another)
            self.frontend, self.detached = None, False
        self.owner = weakref.ref(current)

    def detach(self, why: str = "") -> None:
        """No front end can answer (script ran out, no terminal): run to the end without stopping
        (`why`, when given, says so)."""
        self.detached = True
        self.mode = "run"
        if why:
            emit(Info(why))

    # -- commands: the command object runs them (dynstep.step.commands) -------------------------

    def execute(self, line: str) -> bool:
        """Run one command line at a stop; True when it resumes the program."""
        return self.commands.execute(line)

    def run_command(self, name: str, arg: str = "", *, line: str | None = None) -> bool:
        """A command by its full name, with no line to parse (a DAP resume request)."""
        return self.commands.run_command(name, arg, line=line)

    def evaluate(self, expr: str) -> Any:
        return self.commands.evaluate(expr)

    def assign(self, name: str, result: Any) -> None:
        """`set NAME = ...` with the value in hand (DAP setVariable)."""
        self.commands.assign(name, result)

    def write_value(self, stop: Stop, result: Any) -> None:
        self.commands.write_value(stop, result)

    def write_tensor(self, x: torch.Tensor, result: Any, label: str) -> None:
        self.commands.write_tensor(x, result, label)

    def serve(self, line: str, make_stop: Callable[[], Stop]) -> list[Any]:
        """A command another rank sent here, run with this stop point bound; the events it emitted."""
        return self.commands.serve(line, make_stop)

    def at_stop(self) -> bool:
        return self.current is not None

    # -- what other rooms call: the stepper's state is written here, not from outside ----------

    def resume(self, kind: str) -> None:
        """How the program goes on from outside a stop: "step" stops at the next stop point of any
        graph (answered again if the front end had let go: Ctrl-C, the bytecode stepper stepping
        into a graph), "run" only at pause sites and breakpoints."""
        if kind not in ("step", "run"):
            raise ValueError(f"resume({kind!r}): expected 'step' or 'run'")
        if kind == "step":
            self.detached = False
        self.mode = kind

    def serve_everywhere(self, on: bool) -> None:
        """A front end that takes its breakpoints later (an editor: dynstep.dap) asks for stop points
        in every graph compiled from now on (or no longer); its front end is asked for again at the
        next stop (`core.wiring.make_frontend`)."""
        self.stop_points = on
        self.frontend = None
        if on:
            self.detached = False

    def front_state(self) -> tuple[Any, ...]:
        """Who answers stops now, to hand back with `restore_front` (step_bytecode() lends it)."""
        return self.config, self.frontend, self.detached, self.mode

    def restore_front(self, state: tuple[Any, ...]) -> None:
        self.config, self.frontend, self.detached, self.mode = state

    def share_front(self, frontend_kind: str | None, commands: str | None, frontend: Frontend | None, *,
                    detached: bool) -> None:
        """Another stepper's front end answers node stops too (step_bytecode(): one command queue);
        the config is the one superstep's step=True options give, so compiling keeps it (`configure`)."""
        self.config = StepConfig(frontend_kind, commands, True, per_call=self.per_call)
        self.frontend, self.detached = frontend, detached

    def use_coordinator(self, coordinator: Coordinator) -> None:
        """A distributed job's lockstep (jobs.coordinator), plugged in by superstep's pause pass."""
        self.coordinator = coordinator

    def interrupt(self) -> None:
        """Stop at the next stop point of any graph (a client's pause request; thread-safe enough:
        one flag read at every stop point, and graphs with two variants pick the stepping one)."""
        self.interrupted = True

    def set_breaks(self, owner: str, ids: set[int] | frozenset[int]) -> None:
        """Breakpoints an owner (an editor session) keeps apart from `break`/`clear` (empty: none).

        Called from the owner's own thread, also while the program thread is stopped (and holds the
        stepper's lock): the new sets are built aside and swapped in, no lock taken."""
        external = {k: v for k, v in self.external_breaks.items() if k != owner}
        if ids:
            external[owner] = frozenset(ids)
        self.external_breaks = external
        self.commands.recompute_breaks()

    # -- run time -----------------------------------------------------------------------------

    def may_stop(self, site_ids: frozenset[int], pauses: dict[int, str]) -> bool:
        """Could a call of a graph with these stop points stop anywhere in it? (see graphs.TwoVariants)"""
        if self.interrupted:
            return True
        if self.detached:
            self.follow_call()
            if self.detached:
                return False
        if self.mode != "run" or not self.break_ids.isdisjoint(site_ids):
            return True
        return any(probe not in self.disabled for probe in pauses.values())

    def every_node(self, site_ids: frozenset[int] | None = None) -> bool:
        """Could this rank stop at a step point, not only at pause sites (stepping, a breakpoint in
        these sites or anywhere, an interrupt)? A distributed job's barriers follow it."""
        breaks = bool(self.break_ids) if site_ids is None else not self.break_ids.isdisjoint(site_ids)
        return self.interrupted or self.mode != "run" or breaks

    def reason_to_stop(self, site_id: int, site: Site) -> str | None:
        if self.interrupted:
            return "interrupt"
        if site.actions == ("pause",) and site.probe not in self.disabled:
            return "pause"
        if site_id in self.break_ids:
            return "break"
        return self.mode_reason(site_id, site)

    def mode_reason(self, site_id: int, site: Site) -> str | None:
        """Whether stepping (s, n, out) alone stops here: "step" or None."""
        if self.mode == "step":
            return "step"
        if self.mode == "next" and site.graph != self.next_graph:
            return "step"
        if self.mode == "out" and (site.graph != self.out_from[0] or site_id <= self.out_from[1]):
            return "step"   # site ids grow in graph order: a smaller one is the next call of this graph
        return None

    def stop(self, x: torch.Tensor, site: Site, inputs: dict[str, torch.Tensor], *, reason: str,
             writable: bool, note: str = "", writable_inputs: frozenset[str] = frozenset()) -> None:
        with self._lock:
            stop = Stop(site=site, value=x, inputs=inputs, reason=reason, call=self.hits[site.id] - 1,
                        writable=writable, stack=user_stack(), note=note, writable_inputs=writable_inputs)
            self.interrupted = False
            _trace_stop(stop)
            self.follow_call()
            frontend = self._frontend()
            if frontend is None:
                if note:
                    emit(Info("dynstep: " + note))
                return
            decided = frontend.decide(self, stop)   # conditions, hit counts, logpoints: maybe not a stop
            if decided is None:
                return
            stop.reason = decided
            self.mode = "run"
            self.current = stop
            try:
                self._answer(frontend, stop)
            finally:
                self.current = None

    def _answer(self, frontend: Frontend, stop: Stop) -> None:
        """Show the stop and let the front end answer it; in a distributed job, as the coordinator says
        (the terminal turn, `step --all` from another rank, `q` ending every rank)."""
        info = {"node": stop.site.node, "graph": stop.site.graph, "source": stop.site.source}
        with job_pause(self.coordinator, info, lambda line: self.serve(line, lambda: stop),
                       turn=frontend.shares_terminal) as auto:
            emit(Stopped(reason=stop.reason, site=stop.site, call=stop.call, tensor=tensor_view(stop.value),
                         watches=tuple((w, self.commands.watch_text(w)) for w in self.watches),
                         writable=stop.writable, note=stop.note))
            if auto is not None:
                self.execute(auto)
            else:
                frontend.run(self, stop)

    def active_frontend(self) -> Frontend | None:
        """The front end that answers stops now (None: detached, nothing can answer)."""
        return self._frontend()

    def _frontend(self) -> Frontend | None:
        if self.detached:
            return None
        if self.frontend is None:
            config = self.config or StepConfig()
            self.frontend = wiring.make_frontend(config.frontend, config.commands)
            if self.frontend is None:
                self.detach("dynstep: stdin is not a terminal and no commands were given "
                            "(commands= option, --commands, DYNSTEP_COMMANDS); not stopping, running to the end"
                            + ("; serve the Debug Adapter Protocol to answer from elsewhere (dynstep run --dap PORT, "
                               "DYNSTEP_DAP=PORT: rank r listens on PORT + r; then dynstep attach HOST:PORT)"
                               if self.coordinator is not None else ""))
        return self.frontend


def _trace_stop(stop: Stop) -> None:
    """The pause log in the structured trace (TORCH_TRACE), filed under the compile of the stop's graph."""
    site = stop.site

    def payload() -> dict[str, Any]:
        view = tensor_view(stop.value)
        stats = {k: (v if math.isfinite(v) else str(v)) for k, v in view.stats.to_dict().items()} if view.stats else None
        return {"graph": site.graph, "node": site.node, "op": site.target, "module": site.module,
                "source": site.source, "text": site.source_text, "reason": stop.reason, "call": stop.call,
                "shape": list(view.shape), "dtype": view.dtype, "stats": stats}

    _compat.trace_artifact("dynstep_pause", payload, encoding="json", handle=COMPILE_LOG.handle(site.graph))


def command_names() -> list[str]:
    return commandset.names(StepperCommands)


STEPPER = Stepper()


def on_pause(x: torch.Tensor, site_id: int, inputs: list[torch.Tensor]) -> None:
    """The kernel behind `dynstep::pause`: a dict lookup and a return unless the stepper stops.
    In a distributed job every rank meets the coordinator here, stopping or not."""
    coord = STEPPER.coordinator
    if coord is None:
        _pause(x, site_id, inputs)
        return
    site = SITES.get(site_id)
    coord.stop_point(site, lambda: _pause(x, site_id, inputs) or STEPPER.every_node(),
                     lambda line: STEPPER.serve(line, lambda: _waiting_stop(x, site, inputs)))


def _waiting_stop(x: torch.Tensor, site: Site, inputs: list[torch.Tensor], writable: bool = True) -> Stop:
    """This rank's stop point as a Stop, for commands another rank sends while this one waits."""
    return Stop(site=site, value=x, inputs=dict(zip(site.inputs, inputs)), reason="waiting",
                call=STEPPER.hits[site.id] - 1, writable=writable, stack=())


def _pause(x: torch.Tensor, site_id: int, inputs: list[torch.Tensor]) -> None:
    stepper = STEPPER
    if stepper.detached:
        stepper.follow_call()
        if stepper.detached:
            return
    site = SITES.get(site_id)
    stepper.hits[site_id] += 1
    reason = stepper.reason_to_stop(site_id, site)
    if reason is None:
        return
    names = dict(zip(site.inputs, inputs))
    # the caller's own names for graph inputs too (x, not just l_x_)
    names.update({user: t for user, t in zip(site.input_names, inputs) if user and user not in names})
    stepper.stop(x, site, names, reason=reason, writable=True)


def on_grad_pause(g: torch.Tensor, site: Site) -> None:
    """A pause selector's node, in the backward graph: stop at the gradient flowing into it.

    Read-only: the backward graph is compiled after partitioning, where dynstep cannot make the
    compiler keep an in-place write (pytorch#172248 keeps effectful ops out of the joint graph).
    """
    coord = STEPPER.coordinator
    if coord is None:
        _grad_pause(g, site)
        return
    coord.stop_point(site, lambda: _grad_pause(g, site) or STEPPER.every_node(),
                     lambda line: STEPPER.serve(line, lambda: _waiting_stop(g, site, [], writable=False)))


def _grad_pause(g: torch.Tensor, site: Site) -> None:
    stepper = STEPPER
    if stepper.detached:
        stepper.follow_call()
        if stepper.detached:
            return
    stepper.hits[site.id] += 1
    reason = stepper.reason_to_stop(site.id, site)
    if reason is None:
        return
    stepper.stop(g, site, {}, reason=reason, writable=False,
                 note=f"gradient flowing into {site.node} (backward graph, read-only)")


def stop_nonfinite(x: torch.Tensor, site: Site, message: str) -> None:
    """`nan="stop"`: stop at the probe that saw the first NaN/Inf (the value is read-only there)."""
    STEPPER.hits[site.id] += 1
    if STEPPER.nan_stopped:   # every later value is non-finite too: stop at the first one only
        return
    STEPPER.nan_stopped = True
    STEPPER.stop(x, site, {}, reason="nan", writable=False, note=message)


class _Stopper:
    """What the probe runtime calls for gradient pauses and nan="stop" (connected by step.registration)."""

    grad_pause = staticmethod(on_grad_pause)
    nonfinite = staticmethod(stop_nonfinite)


STOPPER = _Stopper()
