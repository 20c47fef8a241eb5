"""The stepper: what happens when a `dynstep::pause` op runs, and the commands at a stop.

The engine never prints. At a stop it emits a `Stopped` event and hands control to a front end
(`dynstep.frontends`: terminal REPL, scripted commands, pdb), which feeds command lines back to
`Stepper.execute`. Commands are methods ``cmd_<name>``; their docstrings are the help, and
aliases map short names (``s``, ``p``, ``cl``) to them, so the set is open.

    STEPPER.execute("p value.mean()")      # at a stop: emits Evaluated(...)
    STEPPER.execute("s")                   # True: resume, stop after the next node

Modes between stops: ``run`` (stop only at pause sites and breakpoints), ``step`` (stop at the
next stop point of any graph), ``next`` (stop at the next pause site of the current graph, or at
the first stop point of another graph).
"""

from __future__ import annotations

import collections
import dataclasses
import linecache
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any, Protocol

import torch

from . import commandset
from .errors import Abort, SelectorError
from .events import (CommandFailed, Evaluated, GraphShown, HelpShown, Info, Resumed, Stopped, TensorView,
                     WhereShown, emit)
from .sites import SITES, Site

ALIASES = {"c": "continue", "cont": "continue", "s": "step", "n": "next", "p": "print", "w": "where",
           "g": "graph", "b": "break", "cl": "clear", "q": "quit", "exit": "quit", "h": "help", "?": "help"}
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(torch.__file__)


class Frontend(Protocol):
    def run(self, stepper: "Stepper", stop: "Stop") -> None:
        """Show the stop and feed commands to `stepper.execute` until one resumes."""


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


class Stepper:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        """Forget front end, breakpoints, watches and mode (tests; a new `dynstep run`)."""
        self.mode = "run"
        self.next_graph = ""
        self.detached = False
        self.frontend: Frontend | None = None
        self.config: tuple[str | None, str | None, bool] | None = None
        self.breakpoints: dict[str, set[int]] = {}
        self.break_ids: set[int] = set()
        self.disabled: set[str] = set()
        self.watches: list[str] = []
        self.user_vars: dict[str, Any] = {}
        self.hits: collections.Counter[int] = collections.Counter()
        self.current: Stop | None = None
        self.nan_stopped = False

    def configure(self, *, frontend: str | None, commands: str | None, step: bool) -> None:
        """Called by the pause pass; a new front-end configuration starts a new script."""
        key = (frontend, commands, step)
        if key == self.config:
            return
        self.config, self.frontend, self.detached = key, None, False
        if step:
            self.mode = "step"

    def detach(self, why: str) -> None:
        """No front end can answer (script ran out, no terminal): run to the end without stopping."""
        self.detached = True
        self.mode = "run"
        emit(Info(why))

    # -- run time -----------------------------------------------------------------------------

    def may_stop(self, site_ids: frozenset[int], pauses: dict[int, str]) -> bool:
        """Could a call of a graph with these stop points stop anywhere in it? (see pause.two_variants)"""
        if self.detached:
            return False
        if self.mode != "run" or not self.break_ids.isdisjoint(site_ids):
            return True
        return any(probe not in self.disabled for probe in pauses.values())

    def reason_to_stop(self, site_id: int, site: Site) -> str | None:
        if site.actions == ("pause",) and site.probe not in self.disabled:
            return "pause"
        if site_id in self.break_ids:
            return "break"
        if self.mode == "step":
            return "step"
        if self.mode == "next" and site.graph != self.next_graph:
            return "step"
        return None

    def stop(self, x: torch.Tensor, site: Site, inputs: dict[str, torch.Tensor], *, reason: str,
             writable: bool, note: str = "", writable_inputs: frozenset[str] = frozenset()) -> None:
        with self._lock:
            stop = Stop(site=site, value=x, inputs=inputs, reason=reason, call=self.hits[site.id] - 1,
                        writable=writable, stack=_user_stack(), note=note, writable_inputs=writable_inputs)
            frontend = self._frontend()
            if frontend is None:
                if note:
                    emit(Info("dynstep: " + note))
                return
            self.mode = "run"
            self.current = stop
            try:
                emit(Stopped(reason=reason, site=site, call=stop.call, tensor=tensor_view(x),
                             watches=tuple((w, self._watch_text(w)) for w in self.watches),
                             writable=writable, note=note))
                frontend.run(self, stop)
            finally:
                self.current = None

    def active_frontend(self) -> Frontend | None:
        """The front end that answers stops now (None: detached, nothing can answer)."""
        return self._frontend()

    def _frontend(self) -> Frontend | None:
        if self.detached:
            return None
        if self.frontend is None:
            from .frontends import make_frontend

            kind, commands, _ = self.config or (None, None, False)
            self.frontend = make_frontend(kind, commands)
            if self.frontend is None:
                self.detach("dynstep: stdin is not a terminal and no commands were given "
                            "(commands= option, --commands, DYNSTEP_COMMANDS); not stopping, running to the end")
        return self.frontend

    # -- commands -----------------------------------------------------------------------------

    def execute(self, line: str) -> bool:
        """Run one command line at the current stop; True when it resumes the program."""
        line = line.strip()
        if not line:
            return False
        name, _, arg = line.partition(" ")
        name = ALIASES.get(name, name)
        method: Callable[[str], bool | None] | None = getattr(self, f"cmd_{name}", None)
        if method is None:
            emit(CommandFailed(line, f"unknown command {name!r}; commands: {', '.join(command_names())} "
                                     "(help shows what each does)"))
            return False
        if self.current is None and name not in ("help", "break", "clear", "watch"):
            emit(CommandFailed(line, f"{name!r} needs a stop; the program is not paused"))
            return False
        try:
            return bool(method(arg.strip()))
        except Abort:
            raise
        except Exception as exc:   # a typo in an expression must not take the program down
            emit(CommandFailed(line, f"{type(exc).__name__}: {exc}"))
            return False

    def namespace(self) -> dict[str, Any]:
        stop = self.current
        ns: dict[str, Any] = {"torch": torch, **self.user_vars}
        if stop is not None:
            ns.update(stop.inputs)
            ns.update({n: stop.value for n in stop.names()})
        return ns

    def evaluate(self, expr: str) -> Any:
        if not expr:
            raise ValueError("an expression is needed, e.g. p value[0, :4]")
        return eval(compile(expr, "<dynstep>", "eval"), {"__builtins__": __builtins__}, self.namespace())

    def cmd_continue(self, arg: str) -> bool:
        """continue, c: run on; stop again at the next pause selector or breakpoint hit."""
        self.mode = "run"
        emit(Resumed("continue"))
        return True

    def cmd_step(self, arg: str) -> bool:
        """step, s: run the next node, whatever it is (into the next graph after a graph break)."""
        self.mode = "step"
        emit(Resumed("step"))
        return True

    def cmd_next(self, arg: str) -> bool:
        """next, n: run to the next pause-selected node of this graph (or the first node of another graph)."""
        assert self.current is not None
        self.mode, self.next_graph = "next", self.current.site.graph
        emit(Resumed("next"))
        return True

    def cmd_print(self, arg: str) -> None:
        """print, p EXPR: evaluate EXPR; `value`, the node's FX name and its inputs' names are bound."""
        result = self.evaluate(arg)
        emit(Evaluated(arg, _text(result), tensor_view(result) if isinstance(result, torch.Tensor) else None))

    def cmd_set(self, arg: str) -> None:
        """set NAME = EXPR: set value = EXPR replaces the value here; every later node sees it."""
        stop = self.current
        assert stop is not None
        name, eq, expr = arg.partition("=")
        name = name.strip()
        if not eq or not name.isidentifier() or not expr.strip():
            raise ValueError("usage: set NAME = EXPR   (set value = value.clamp(-1, 1))")
        result = self.evaluate(expr.strip())
        if name in stop.names():
            self.write_value(stop, result)
            emit(Info(f"{stop.site.node} ({', '.join(stop.names())}) replaced; later nodes see the new value"))
        elif name in stop.writable_inputs:
            self.write_tensor(stop.inputs[name], result, name)
            emit(Info(f"{name} replaced in place; the rest of the program sees the new value"))
        elif name in stop.inputs:
            raise ValueError(f"{name!r} is an input of {stop.site.node} and was already used; set it at its own "
                             f"stop (break node:{name}) or set value = ... here")
        else:
            self.user_vars[name] = result
            emit(Info(f"{name} bound for later commands"))

    def write_value(self, stop: Stop, result: Any) -> None:
        if not stop.writable:
            raise ValueError(f"this stop ({stop.reason}) only observes {stop.site.node}; its value is read-only")
        self.write_tensor(stop.value, result, stop.site.node)

    def write_tensor(self, x: torch.Tensor, result: Any, label: str) -> None:
        new = torch.as_tensor(result, dtype=x.dtype, device=x.device)
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
        stop = self.current
        assert stop is not None
        site = stop.site
        file, _, line = site.frames[-1].rpartition(":") if site.frames else ("", "", "0")
        lineno = int(line or 0)
        lines = tuple((i, linecache.getline(file, i).rstrip("\n")) for i in range(max(1, lineno - 3), lineno + 4)
                      if file and linecache.getline(file, i))
        emit(WhereShown(file=file, line=lineno, lines=lines, module=site.module, node=site.node,
                        target=site.target, stack=stop.stack))

    def cmd_graph(self, arg: str) -> None:
        """graph, g: the listing of this graph, the current node marked."""
        from .pause import GRAPHS

        stop = self.current
        assert stop is not None
        entry = GRAPHS.get(stop.site.graph)
        if entry is None:
            raise ValueError(f"no listing for graph {stop.site.graph} (a probe stop outside a stepped graph)")
        emit(GraphShown(entry.graph_id, entry.rows, stop.site.node))

    def cmd_break(self, arg: str) -> None:
        """break, b SEL: also stop at the nodes a selector picks (b alone lists breakpoints)."""
        from . import selectors as sel
        from .pause import break_sites

        if not arg:
            listing = ", ".join(f"{t} ({len(ids)} node(s))" for t, ids in self.breakpoints.items()) or "none"
            emit(Info(f"breakpoints: {listing}"))
            return
        try:
            selector = sel.parse(arg)
        except SelectorError as exc:
            raise ValueError(str(exc)) from None
        ids = break_sites(selector)
        self.breakpoints[selector.text] = ids
        self.break_ids |= ids
        self.disabled.discard(selector.text)
        if not ids:
            emit(Info(f"breakpoint {selector.text} matches no stop point yet; only graphs with stop points "
                      "(a pause selector, or step=True) can stop"))
        else:
            emit(Info(f"breakpoint {selector.text}: {len(ids)} node(s)"))

    def cmd_clear(self, arg: str) -> None:
        """clear, cl [SEL]: remove a breakpoint or pause selector (all of them without SEL)."""
        pauses = {s.probe for s in SITES.all() if s.kind == "pause" and s.probe}
        names = [arg] if arg else list(self.breakpoints) + sorted(pauses)
        known = set(self.breakpoints) | pauses
        if arg and arg not in known:
            raise ValueError(f"no breakpoint or pause selector {arg!r}; set: {sorted(known) or 'none'}")
        for text in names:
            self.breakpoints.pop(text, None)
            if text in pauses:
                self.disabled.add(text)
        self.break_ids = set().union(*self.breakpoints.values()) if self.breakpoints else set()
        emit(Info(f"cleared: {', '.join(names) or 'nothing'}"))

    def cmd_watch(self, arg: str) -> None:
        """watch EXPR: show EXPR at every stop (watch alone lists them)."""
        if arg:
            self.watches.append(arg)
        for w in self.watches:
            emit(Evaluated(w, self._watch_text(w), None))
        if not self.watches:
            emit(Info("no watches"))

    def _watch_text(self, expr: str) -> str:
        try:
            return _text(self.evaluate(expr))
        except Exception as exc:
            return f"<{type(exc).__name__}: {exc}>"

    def cmd_record(self, arg: str) -> None:
        """record: put a copy of the value at this stop into the session (dynstep.session())."""
        from .records import Snapshot
        from .sessions import deliver
        from .stats import stats_of

        stop = self.current
        assert stop is not None
        x, site = stop.value, stop.site
        deliver(Snapshot(kind="value", probe=site.probe or "record", node=site.node, target=site.target,
                         module=site.module, source=site.source, graph=site.graph, call=stop.call,
                         shape=tuple(x.shape), dtype=str(x.dtype).replace("torch.", ""), device=str(x.device),
                         stats=stats_of(x), tensor=x.detach().to("cpu", copy=True), site=site.id,
                         source_text=site.source_text))
        emit(Info(f"recorded {site.node} (call {stop.call}) into the session"))

    def cmd_quit(self, arg: str) -> None:
        """quit, q: stop the program here with dynstep.Abort."""
        stop = self.current
        assert stop is not None
        self.mode = "run"
        raise Abort(f"quit at node {stop.site.node} ({stop.site.target}) in graph {stop.site.graph}, "
                    f"{stop.site.source or 'no source line'}: program stopped from the debugger")

    def cmd_help(self, arg: str) -> None:
        """help, h: this list."""
        emit(HelpShown(commandset.help_entries(self, ALIASES)))


def command_names() -> list[str]:
    return commandset.names(Stepper)



def _text(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        with _print_options():
            return repr(value.detach())
    return repr(value)


class _print_options:
    """Short tensor reprs at a stop, the user's print options restored afterwards."""

    def __enter__(self) -> None:
        from ._compat import print_options

        self._saved = print_options()
        torch.set_printoptions(threshold=64, edgeitems=3, precision=4)

    def __exit__(self, *exc: object) -> None:
        from ._compat import restore_print_options

        restore_print_options(self._saved)


def tensor_view(x: Any) -> TensorView | None:
    from .stats import stats_of, unsupported_reason

    if not isinstance(x, torch.Tensor) or unsupported_reason(x) is not None:
        return None
    flat = x.detach().flatten()[:6].to("cpu")
    sample = tuple(float(v) for v in flat.tolist()) if not x.dtype.is_complex else ()
    return TensorView(shape=tuple(x.shape), dtype=str(x.dtype).replace("torch.", ""), device=str(x.device),
                      stats=stats_of(x) if x.numel() else None, sample=sample)


def _user_stack() -> tuple[str, ...]:
    """The Python frames that led into the compiled call, without torch's and dynstep's own."""
    from ._compat import inductor_cache_dir

    skip = ("<", _TORCH_DIR, _PKG_DIR, inductor_cache_dir())
    out = []
    for fs in traceback.extract_stack()[:-2]:
        f = fs.filename
        if f.startswith(skip) or os.path.basename(f) == "runpy.py":
            continue
        out.append(f"{f}:{fs.lineno} in {fs.name}: {(fs.line or '').strip()}")
    return tuple(out)


STEPPER = Stepper()


def on_pause(x: torch.Tensor, site_id: int, inputs: list[torch.Tensor]) -> None:
    """The kernel behind `dynstep::pause`: a dict lookup and a return unless the stepper stops."""
    stepper = STEPPER
    if stepper.detached:
        return
    site = SITES.get(site_id)
    stepper.hits[site_id] += 1
    reason = stepper.reason_to_stop(site_id, site)
    if reason is None:
        return
    names = dict(zip(site.inputs, inputs))
    stepper.stop(x, site, names, reason=reason, writable=True)


def on_grad_pause(g: torch.Tensor, site: Site) -> None:
    """A pause selector's node, in the backward graph: stop at the gradient flowing into it.

    Read-only: the backward graph is compiled after partitioning, where dynstep cannot make the
    compiler keep an in-place write (pytorch#172248 keeps effectful ops out of the joint graph).
    """
    stepper = STEPPER
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
