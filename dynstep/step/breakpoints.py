"""`dynstep.breakpoint()`: one call that stops at compile time and again at run time, no graph break.

    @torch.compile(fullgraph=True)                 # any backend, not only superstep
    def block(x, w):
        h = x @ w
        dynstep.breakpoint()                       # or dynstep.breakpoint(when=lambda h: h.abs().max() > 10)
        return torch.relu(h)

While Dynamo traces the line, `comptime` runs `_at_compile_time`: it builds a `CompileStop`
(symbolic locals, graph so far, guards, inlined frames, the recompile reason) for the front end,
and records a `dynstep::breakpoint(Tensor(a!)[] values, Tensor[] readonly, int bp)` call on the
tensor locals into the graph being traced, so every run of the compiled code stops there with the
real values (the runtime stepper's commands then work: p, set, s, c). In eager code the same call
stops with the caller's locals. `DYNSTEP_BREAKPOINTS=0` (or `dynstep.breakpoints.disable()`) turns
every breakpoint into a no-op that adds nothing to the graph.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .. import _compat
from ..core.options import switched_off
from ..ops import schema
from . import bp_stops
from . import registration as step_kernel
from .compile_stop import CONTEXTS, CompileStop, Guard, LocalInfo, Scope

_COMPTIME = _compat.comptime()
_state = {"enabled": not switched_off("DYNSTEP_BREAKPOINTS")}


def enable() -> None:
    _state["enabled"] = True


def disable() -> None:
    """Every dynstep.breakpoint() becomes a no-op (graphs compiled afterwards hold no node for it)."""
    _state["enabled"] = False


def breakpoint(*, when: Callable[..., Any] | None = None, compile: bool = True, run: bool = True) -> None:  # noqa: A001
    """Stop here: at compile time with symbolic values, at run time with real ones.

    when: a function whose parameters are named like your locals (``lambda h: h.max() > 10``);
    the runtime stop happens only when it returns True. compile/run: turn one half off.
    """
    if not _state["enabled"]:
        return
    if torch.compiler.is_compiling():
        _COMPTIME(_at_compile_time)
        return
    if run:
        _eager_stop(sys._getframe(1), when)


# -- runtime sites ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BreakpointSite:
    id: int
    file: str
    line: int
    function: str
    code: str
    names: tuple[str, ...]            # writable tensors first, then read-only ones (as in the op call)
    writable: int                     # how many of `names` are writable
    when: Callable[..., Any] | None
    compile_id: str
    occurrence: int


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sites: dict[int, BreakpointSite] = {}
        self._next = 1
        # per compile attempt (its OutputGraph, opaque and unhashable, held weakly): compile ids restart
        # at 0/0 after torch._dynamo.reset() or explain(), so they cannot key this count
        self._attempt: tuple[Any, collections.Counter[tuple[str, int]]] = (None, collections.Counter())

    def add(self, **fields: Any) -> BreakpointSite:
        with self._lock:
            site = BreakpointSite(id=self._next, **fields)
            self._sites[site.id] = site
            self._next += 1
        return site

    def get(self, bp: int) -> BreakpointSite:
        return self._sites[bp]

    def occurrence(self, compile_key: Any, file: str, line: int) -> int:
        """How many dynstep.breakpoint() calls at this line the compile `compile_key` met before (unrolled loops)."""
        with self._lock:
            ref, counts = self._attempt
            if ref is None or ref() is not compile_key:     # Dynamo compiles one frame at a time
                counts = collections.Counter()
                self._attempt = (weakref.ref(compile_key), counts)
            seen = counts[(file, line)]
            counts[(file, line)] += 1
        return seen


BREAKPOINTS = _Registry()


# -- compile time ----------------------------------------------------------------------------------

def _at_compile_time(ctx: Any) -> None:
    frame = _compat.comptime_frame(ctx)
    want_compile = _constant(ctx, "compile", True)
    want_run = _constant(ctx, "run", True)
    when = _compat.function_of_variable(_compat.comptime_local(ctx, "when"))
    compile_id = _compat.current_compile_id()
    occurrence = BREAKPOINTS.occurrence(_compat.compile_attempt(frame.translator), frame.file, frame.line)
    tensors = [(n, v) for n, v in frame.locals if _compat.is_tensor_variable(v)]
    site = _record_runtime_half(frame, tensors, when, compile_id, occurrence) if want_run else None
    stop = CompileStop(
        function=frame.function, file=frame.file, line=frame.line, code=frame.code,
        compile_id=compile_id, recompile_reason=_compat.recompile_reason(),
        locals=tuple(_describe(n, v) for n, v in frame.locals), graph=frame.graph_src,
        guards=tuple(f"{name}: {kind}" for name, kind in frame.guards if "dynstep" not in name),
        shape_guards=frame.shape_guards, backtrace=_backtrace(frame),
        graph_breaks=tuple(_compat.graph_breaks_so_far()), occurrence=occurrence,
        runtime_site=site.id if site else None)
    if site is not None:   # `graph`, `guards`, `locals` at the runtime stop of this breakpoint
        CONTEXTS.put(site.id, stop)
    if want_compile:
        bp_stops.present_compile_stop(stop, {n: _compat.fake_of(v) for n, v in tensors}, _scope(ctx, frame))


def _scope(ctx: Any, frame: _compat.TraceFrame) -> Scope:
    """What `p EXPR` names at the compile-time stop (see dynstep.step.compile_stop)."""
    names: dict[str, Any] = {}
    for name, var in frame.locals:
        ok, value = _compat.python_value(var)
        names[name] = value if ok else _Symbolic(_describe(name, var).text)
    names.update(_compat.compile_scope(ctx, frame))
    names["guards"] = tuple(Guard(source, kind) for source, kind in frame.guards if "dynstep" not in source)
    return Scope(names, lambda: _compat.guards_suppressed(frame.translator))


class _Symbolic:
    """A local Dynamo holds no Python value for (a generator, an unsupported object): its description."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<symbolic {self.text}>"


def _record_runtime_half(frame: _compat.TraceFrame, tensors: list[tuple[str, Any]], when: Any, compile_id: str,
                         occurrence: int) -> "BreakpointSite":
    """Put `dynstep::breakpoint(writable, readonly, id)` into the graph being traced."""
    ensure()
    writable = [(n, v) for n, v in tensors if not _requires_grad(v)]
    readonly = [(n, v) for n, v in tensors if _requires_grad(v)]
    site = BREAKPOINTS.add(file=frame.file, line=frame.line, function=frame.function, code=frame.code,
                           names=tuple(n for n, _ in writable + readonly), writable=len(writable), when=when,
                           compile_id=compile_id, occurrence=occurrence)
    _compat.call_op_in_trace(frame.translator, schema.breakpoint_op,
                             [[v for _, v in writable], [v for _, v in readonly]], site.id)
    return site


def _constant(ctx: Any, name: str, default: Any) -> Any:
    ok, value = _compat.python_constant(_compat.comptime_local(ctx, name))
    return value if ok else default


def _requires_grad(var: Any) -> bool:
    fake = _compat.fake_of(var)
    return bool(getattr(fake, "requires_grad", False))


def _describe(name: str, var: Any) -> LocalInfo:
    var = _compat.realize(var)
    if _compat.is_tensor_variable(var):
        fake = _compat.fake_of(var)
        if fake is not None:
            dtype = str(fake.dtype).replace("torch.", "")
            return LocalInfo(name, "tensor", f"FakeTensor {dtype}{list(fake.shape)} {fake.device}"
                             + ("  requires_grad" if fake.requires_grad else ""))
    ok, value = _compat.python_constant(var)
    if ok:
        return LocalInfo(name, "constant", repr(value))
    sym = _compat.symbolic_value(var)
    if sym is not None:
        return LocalInfo(name, "symint", f"{type(sym).__name__} {sym}")
    try:
        kind = var.python_type().__name__
    except Exception:
        kind = type(var).__name__
    return LocalInfo(name, "other", f"<{kind}>")


def _backtrace(frame: _compat.TraceFrame) -> tuple[str, ...]:
    return tuple(f"{os.path.basename(file)}:{line} in {function}    {code}"
                 for file, line, function, code in frame.backtrace)


# -- run time --------------------------------------------------------------------------------------

def ensure() -> None:
    """dynstep::breakpoint's kernel (this module owns it) and the stepper behind it."""
    step_kernel.ensure()
    schema.impl("breakpoint", on_breakpoint)


def on_breakpoint(writable: list[torch.Tensor], readonly: list[torch.Tensor], bp: int) -> None:
    """The kernel behind dynstep::breakpoint: evaluate `when`, then stop in the runtime stepper."""
    site = BREAKPOINTS.get(bp)
    values = dict(zip(site.names, list(writable) + list(readonly)))
    if site.when is not None and not _when_holds(site.when, values, site):
        return
    bp_stops.runtime_stop(site, values, writable_names=set(site.names[:site.writable]))


def _when_holds(when: Callable[..., Any], values: dict[str, Any], site: BreakpointSite) -> bool:
    """Whether `when` asks for the stop. A `when` that cannot answer never takes the program down: it
    warns once, saying what was wrong, and stops, so the values it was given can be looked at."""
    where = f"dynstep.breakpoint(when=...) at {os.path.basename(site.file)}:{site.line}"
    params = when.__code__.co_varnames[:when.__code__.co_argcount]
    missing = [p for p in params if p not in values]
    if missing:
        return _when_failed(site, f"{where} asks for {missing}, which are not tensor locals there "
                                  f"(available: {list(values)}); name its parameters like your tensors")
    try:
        result = when(**{p: values[p] for p in params})
        if isinstance(result, torch.Tensor) and result.numel() != 1:
            return _when_failed(site, f"{where} returned a tensor of {result.numel()} elements; expected True/False "
                                      "or a one-element tensor, e.g. when=lambda h: h.abs().max() > 10")
        return bool(result)
    except Exception as exc:
        return _when_failed(site, f"{where} raised {type(exc).__name__}: {exc}")


_when_warned: set[tuple[int, str, int]] = set()


def _when_failed(site: BreakpointSite, message: str) -> bool:
    key = (site.id, site.file, site.line)
    if key not in _when_warned:
        _when_warned.add(key)
        warnings.warn(message + "; stopping here so you can look", RuntimeWarning, stacklevel=3)
    return True


def _eager_stop(frame: Any, when: Callable[..., Any] | None) -> None:
    values = {k: v for k, v in frame.f_locals.items() if isinstance(v, torch.Tensor)}
    code = frame.f_code
    site = BreakpointSite(id=0, file=code.co_filename, line=frame.f_lineno, function=code.co_name,
                          code=_line_text(code.co_filename, frame.f_lineno), names=tuple(values),
                          writable=len(values), when=when, compile_id="eager", occurrence=0)
    if when is not None and not _when_holds(when, values, site):
        return
    bp_stops.runtime_stop(site, values, writable_names=set(values))


def _line_text(file: str, line: int) -> str:
    import linecache

    return linecache.getline(file, line).strip()
