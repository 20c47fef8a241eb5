"""The runtime stepper's commands at a stop: methods ``cmd_<name>`` (docstring = help).

An object holding the stepper (`Stepper.commands = StepperCommands(stepper)`), whose state (`current`,
`mode`, `breakpoints`, ...) they read and change; dispatched by `dynstep.core.commands.CommandSet`.
Each emits events and returns True when it resumes the program; the stepper's `execute`,
`run_command`, `evaluate` and `assign` hand over to them.

    STEPPER.execute("p value.mean()")      # at a stop: emits Evaluated(...)
    STEPPER.execute("set value = value * 0")
"""

from __future__ import annotations

import linecache
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..core.errors import Abort, SelectorError
from ..core.events import CompileView, CompileViewShown, Evaluated, GraphShown, Info, Resumed, WhereShown, emit
from ..core.command_table import NODE_STOP
from ..core.records import Snapshot
from ..core.sites import SITES
from ..graph import selectors as sel
from ..jobs.identity import rank_world
from ..probe.sessions import deliver
from ..probe.stats import stats_of
from .compile_stop import CONTEXTS
from .graphs import GRAPHS, break_sites
from .rank_commands import RankCommands, RankState
from .values import tensor_view, value_text

if TYPE_CHECKING:
    from ..core.stop import Stop

ALIASES = NODE_STOP.aliases   # the one table of this set's commands: dynstep/core/command_table.py


class StepState(RankState, Protocol):
    """The stepper's state these commands read and change (dynstep.step.stepper.Stepper)."""

    mode: str
    next_graph: str
    out_from: tuple[str, int]
    breakpoints: dict[str, set[int]]
    break_ids: set[int]
    external_breaks: dict[str, frozenset[int]]
    disabled: set[str]
    watches: list[str]
    user_vars: dict[str, Any]

    def run_command(self, name: str, arg: str = "", *, line: str | None = None) -> bool: ...


class StepperCommands(RankCommands):
    """The runtime stepper's commands, an object holding the stepper (`Stepper.commands`): the state
    between stops is the stepper's (`self.stepper`); these read it and change it as a command says."""

    aliases = ALIASES
    without_stop = NODE_STOP.without_stop

    stepper: StepState

    def __init__(self, stepper: StepState) -> None:
        self.stepper = stepper

    def at_stop(self) -> bool:
        return self.stepper.current is not None

    def namespace(self) -> dict[str, Any]:
        stop = self.stepper.current
        ns: dict[str, Any] = {"torch": torch, **self.stepper.user_vars}
        if stop is not None:
            ns.update(stop.inputs)
            ns.update({n: stop.value for n in stop.names()})
        return ns

    def evaluate(self, expr: str) -> Any:
        if not expr:
            raise ValueError("an expression is needed, e.g. p value[0, :4]")
        return eval(compile(expr, "<dynstep>", "eval"), {"__builtins__": __builtins__}, self.namespace())

    def recompute_breaks(self) -> None:
        """The sites that stop: the REPL's `break` selectors and every owner's (`Stepper.set_breaks`)."""
        s = self.stepper
        s.break_ids = set().union(*s.breakpoints.values(), *s.external_breaks.values())

    def cmd_continue(self, arg: str) -> bool:
        """continue, c: run on; stop again at the next pause selector or breakpoint hit."""
        self.stepper.mode = "run"
        emit(Resumed("continue"))
        return True

    def cmd_step(self, arg: str) -> bool:
        """step, s [--all]: run the next node, whatever it is; --all: every paused rank steps with this one."""
        if arg == "--all":
            if self.stepper.coordinator is None:
                raise ValueError("step --all steps every paused rank of a distributed job; this is one process")
            self.stepper.coordinator.step_all()
        self.stepper.mode = "step"
        emit(Resumed("step"))
        return True

    def cmd_next(self, arg: str) -> bool:
        """next, n: run to the next pause-selected node of this graph (or the first node of another graph)."""
        assert self.stepper.current is not None
        self.stepper.mode, self.stepper.next_graph = "next", self.stepper.current.site.graph
        emit(Resumed("next"))
        return True

    def cmd_out(self, arg: str) -> bool:
        """out: run to the first node of the next graph call (another graph, or this one again)."""
        assert self.stepper.current is not None
        self.stepper.mode = "out"
        self.stepper.out_from = (self.stepper.current.site.graph, self.stepper.current.site.id)
        emit(Resumed("out"))
        return True

    def cmd_print(self, arg: str) -> None:
        """print, p EXPR: evaluate EXPR; `value`, the node's FX name and its inputs' names are bound."""
        result = self.evaluate(arg)
        emit(Evaluated(arg, value_text(result), tensor_view(result) if isinstance(result, torch.Tensor) else None))

    def cmd_set(self, arg: str) -> None:
        """set NAME = EXPR: set value = EXPR replaces the value here; every later node sees it."""
        name, eq, expr = arg.partition("=")
        name = name.strip()
        if not eq or not name.isidentifier() or not expr.strip():
            raise ValueError("usage: set NAME = EXPR   (set value = value.clamp(-1, 1))")
        self.assign(name, self.evaluate(expr.strip()))

    def assign(self, name: str, result: Any) -> None:
        """`set NAME = ...` with the value in hand (the DAP's setVariable calls it directly): the node's
        value or a writable input replaced, an input the program owns refused, any other name bound."""
        stop = self.stepper.current
        if stop is None:
            raise ValueError(f"cannot set {name!r}: the program is not stopped")
        if name in stop.names():
            self.write_value(stop, result)
            emit(Info(f"{stop.site.node} ({', '.join(stop.names())}) replaced; later nodes see the new value"))
        elif name in stop.writable_inputs:
            self.write_tensor(stop.inputs[name], result, name)
            emit(Info(f"{name} replaced in place; the rest of the program sees the new value"))
        elif name in stop.site.input_names or (name in stop.inputs and name.startswith("l_")):
            raise ValueError(f"{name!r} is an input of the compiled graph (the caller's tensor), and dynstep never "
                             "writes into the caller's tensors; change it before the call, or set value = ... here")
        elif name in stop.inputs:
            raise ValueError(f"{name!r} is an input of {stop.site.node} and was already used; set it at its own "
                             f"stop (break node:{name}) or set value = ... here")
        else:
            self.stepper.user_vars[name] = result
            emit(Info(f"{name} bound for later commands"))

    def write_value(self, stop: Stop, result: Any) -> None:
        if not stop.writable:
            raise ValueError(f"this stop ({stop.reason}) only observes {stop.site.node}; its value is read-only")
        self.write_tensor(stop.value, result, stop.site.node)

    def write_tensor(self, x: torch.Tensor, result: Any, label: str) -> None:
        what = f"{str(x.dtype).replace('torch.', '')}{list(x.shape)} on {x.device}"
        if not isinstance(result, (torch.Tensor, int, float, bool, list, tuple)):
            raise ValueError(f"cannot write a {type(result).__name__} into {label} ({what}); expected a tensor or "
                             "a number, e.g. set value = value.clamp(-1, 1) or set value = 0")
        if isinstance(result, torch.Tensor) and result.is_complex() and not x.is_complex():
            raise ValueError(f"cannot write a complex tensor into {label} ({what}): the imaginary part would be "
                             "dropped; write result.real or result.abs() if that is what you mean")
        try:
            new = torch.as_tensor(result, dtype=x.dtype, device=x.device)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"cannot write {type(result).__name__} {result!r:.60} into {label} ({what}): {exc}") from None
        try:
            torch.broadcast_shapes(new.shape, x.shape)
        except RuntimeError:
            raise ValueError(f"cannot write a value of shape {list(new.shape)} into {label} of shape "
                             f"{list(x.shape)}; the compiled graph was built for that shape") from None
        if tuple(torch.broadcast_shapes(new.shape, x.shape)) != tuple(x.shape):
            raise ValueError(f"a value of shape {list(new.shape)} does not fit {list(x.shape)}")
        with torch.no_grad():
            x.copy_(new)

    def cmd_where(self, arg: str) -> None:
        """where, w: the user's source around this node, its module path, and the Python stack."""
        stop = self.stepper.current
        assert stop is not None
        site = stop.site
        file, _, line = site.frames[-1].rpartition(":") if site.frames else ("", "", "0")
        lineno = int(line or 0)
        lines = tuple((i, linecache.getline(file, i).rstrip("\n")) for i in range(max(1, lineno - 3), lineno + 4)
                      if file and linecache.getline(file, i))
        emit(WhereShown(file=file, line=lineno, lines=lines, module=site.module, node=site.node,
                        target=site.target, stack=stop.stack))

    def cmd_graph(self, arg: str) -> None:
        """graph, g: the listing of this graph, the current node marked (at a breakpoint: the graph Dynamo traced)."""
        stop = self.stepper.current
        assert stop is not None
        context = CONTEXTS.of_site(stop.site.id)
        if context is not None:    # a breakpoint's runtime stop: the graph as Dynamo had traced it to that line
            emit(CompileViewShown(CompileView("graph", f"graph {stop.site.graph}, traced up to {context.location}",
                                              tuple(context.graph.strip("\n").splitlines()))))
            return
        entry = GRAPHS.get(stop.site.graph)
        if entry is None:
            raise ValueError(f"no listing for graph {stop.site.graph} (a probe stop outside a stepped graph; "
                             "`code` shows every stage of what was compiled)")
        emit(GraphShown(entry.graph_id, entry.rows, stop.site.node))

    def cmd_locals(self, arg: str) -> None:
        """locals: the names bound here (at a breakpoint: every local, tensors with their real values)."""
        stop = self.stepper.current
        assert stop is not None
        real = {**stop.inputs, **{n: stop.value for n in stop.names()}}
        context = CONTEXTS.of_site(stop.site.id)
        shown = [x.name for x in context.locals] if context is not None else list(real)
        lines = [f"{name} = {value_text(real[name])}" for name in shown if name in real]
        if context is not None:
            lines += [f"{x.name} = {x.text}   (as Dynamo saw it at compile {context.compile_id})"
                      for x in context.locals if x.name not in real]
        lines += [f"{name} = {value_text(v)}   (bound with set)" for name, v in self.stepper.user_vars.items()]
        emit(CompileViewShown(CompileView("locals", f"locals at {stop.site.node}", tuple(lines))))

    def cmd_guards(self, arg: str) -> None:
        """guards: at a dynstep.breakpoint() stop, the guards Dynamo had installed when it traced that line."""
        stop = self.stepper.current
        assert stop is not None
        context = CONTEXTS.of_site(stop.site.id)
        if context is None:
            raise ValueError("guards are known at dynstep.breakpoint() stops (this is a stop at a graph node); "
                             "the bytecode stepper's `guards` shows every cache entry's guards")
        shape = tuple(f"shape: {g}" for g in context.shape_guards)
        emit(CompileViewShown(CompileView("guards", f"guards of compile {context.compile_id} at {context.location}",
                                          context.guards + shape)))

    def cmd_code(self, arg: str) -> None:
        """code [STAGE [all]]: this compile's stages (dynamo, aot, post-grad, inductor, bytecode...), this node marked."""
        from ..stages.capture import compile_id_of_graph
        from ..stages.view import show, stage_list

        stop = self.stepper.current
        assert stop is not None
        compile_id = compile_id_of_graph(stop.site.graph)
        wanted, _, rest = arg.partition(" ")
        if not wanted:
            have = stage_list(compile_id)
            listing = ", ".join(have) or "none captured (under dynstep run, and for graphs with stop points, they are)"
            emit(Info(f"compile {compile_id or '?'}: {listing}; code STAGE shows one, code STAGE all the whole of it"))
            return
        emit(show(compile_id, wanted, node=stop.site.node, source=stop.site.source, whole=rest.strip() == "all"))

    def cmd_break(self, arg: str) -> None:
        """break, b SEL: also stop at the nodes a selector picks (b alone lists breakpoints)."""
        if not arg:
            listing = ", ".join(f"{t} ({len(ids)} node(s))" for t, ids in self.stepper.breakpoints.items()) or "none"
            emit(Info(f"breakpoints: {listing}"))
            return
        try:
            selector = sel.parse(arg)
        except SelectorError as exc:
            raise ValueError(str(exc)) from None
        ids = break_sites(selector)
        self.stepper.breakpoints[selector.text] = ids
        self.recompute_breaks()
        self.stepper.disabled.discard(selector.text)
        if not ids:
            emit(Info(f"breakpoint {selector.text} matches no stop point yet; only graphs with stop points "
                      "(a pause selector, or step=True) can stop"))
        else:
            emit(Info(f"breakpoint {selector.text}: {len(ids)} node(s)"))

    def cmd_clear(self, arg: str) -> None:
        """clear, cl [SEL]: remove a breakpoint or pause selector (all of them without SEL)."""
        pauses = {s.probe for s in SITES.all() if s.kind == "pause" and s.probe}
        names = [arg] if arg else list(self.stepper.breakpoints) + sorted(pauses)
        known = set(self.stepper.breakpoints) | pauses
        if arg and arg not in known:
            raise ValueError(f"no breakpoint or pause selector {arg!r}; set: {sorted(known) or 'none'}")
        for text in names:
            self.stepper.breakpoints.pop(text, None)
            if text in pauses:
                self.stepper.disabled.add(text)
        self.recompute_breaks()
        emit(Info(f"cleared: {', '.join(names) or 'nothing'}"))

    def cmd_watch(self, arg: str) -> None:
        """watch EXPR: show EXPR at every stop (watch alone lists them)."""
        if arg:
            self.stepper.watches.append(arg)
        for w in self.stepper.watches:
            emit(Evaluated(w, self.watch_text(w), None))
        if not self.stepper.watches:
            emit(Info("no watches"))

    def watch_text(self, expr: str) -> str:
        try:
            return value_text(self.evaluate(expr))
        except Exception as exc:
            return f"<{type(exc).__name__}: {exc}>"

    def cmd_record(self, arg: str) -> None:
        """record: put a copy of the value at this stop into the session (dynstep.session())."""
        stop = self.stepper.current
        assert stop is not None
        x, site = stop.value, stop.site
        rank, world = rank_world()
        deliver(Snapshot(kind="value", probe=site.probe or "record", node=site.node, target=site.target,
                         module=site.module, source=site.source, graph=site.graph, call=stop.call,
                         shape=tuple(x.shape), dtype=str(x.dtype).replace("torch.", ""), device=str(x.device),
                         stats=stats_of(x), tensor=x.detach().to("cpu", copy=True), site=site.id,
                         source_text=site.source_text, rank=rank, world_size=world))
        emit(Info(f"recorded {site.node} (call {stop.call}) into the session"))

    def cmd_native(self, arg: str) -> bool:
        """native [break [N]]: the native kernel that computes this node; break: a gdb breakpoint on it, run on."""
        from ..mixed.commands import native   # the mixed-mode room; it never imports the stepper

        return native(self.stepper, arg)

    def cmd_quit(self, arg: str) -> None:
        """quit, q: stop the program here with dynstep.Abort."""
        stop = self.stepper.current
        assert stop is not None
        self.stepper.mode = "run"
        raise Abort(f"quit at node {stop.site.node} ({stop.site.target}) in graph {stop.site.graph}, "
                    f"{stop.site.source or 'no source line'}: program stopped from the debugger")
