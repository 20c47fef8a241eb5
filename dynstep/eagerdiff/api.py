"""Entry points of the diff: `diff(fn, *args)`, the `diffing()` patch used by `dynstep diff
SCRIPT`, and the hook behind superstep's `options={"diff": True}`.

    report = dynstep.diff(model, x, backend="inductor")
    with diffing(DiffConfig(backend="inductor")) as collector:   # every torch.compile is diffed
        runpy.run_path("train.py", run_name="__main__")
    collector.report().ok

Each compiled graph is handed to a `Collector`, whose backend diffs the first `calls` calls of
the graph (compiling probed copies as the engine needs). Under `diffing()` the program gets the
compiled values of the backend it asked for (with its mode and options), as without the diff;
`dynstep.diff()` runs the graph eagerly after diffing it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx

from .. import _compat
from ..graph import info as gi
from . import _backends
from .engine import DiffConfig, Progress, diff_graph
from .probed import fresh_copy
from .judge import Tolerance
from .report import DiffReport, GraphDiff


class Collector:
    """A torch.compile backend that diffs every graph it is given and keeps the results.

    With `keep_compiled`, each graph is also compiled with the backend under test and the program
    gets the compiled values (what `dynstep diff SCRIPT` does, so the script sees its own symptom);
    without, the program goes on with the graph run eagerly."""

    def __init__(self, cfg: DiffConfig, *, calls: int = 1, keep_compiled: bool = False) -> None:
        self.cfg, self.calls, self.keep_compiled = cfg, calls, keep_compiled
        self.graphs: list[GraphDiff] = []
        self._lock = threading.Lock()
        self._count = 0

    def backend(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
        return self.backend_for(self.cfg)(gm, example_inputs)

    def backend_for(self, cfg: DiffConfig) -> Callable[..., Callable[..., Any]]:
        """A torch.compile backend diffing every graph with `cfg` (its backend, mode and options)."""
        def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
            name = gi.graph_id(gm, _compat.current_compile_id())
            gi.name_modules(gm)   # module paths as the user writes them, read when the graph is diffed
            calls = [0]
            compiled = gm
            if self.keep_compiled:   # a copy: a compiler may rewrite the graph it is given, the diff reads it
                compiled = _backends.compile_graph(fresh_copy(gm), example_inputs, cfg.backend, mode=cfg.mode,
                                                   options=cfg.options)

            def run(*inputs: Any) -> Any:
                if calls[0] < self.calls:
                    try:
                        gd = diff_graph(gm, inputs, cfg, graph=name, call=calls[0])
                    finally:   # a progress display steps aside while the program runs on
                        getattr(cfg.progress, "done", lambda: None)()
                    with self._lock:
                        self.graphs.append(gd)
                calls[0] += 1
                return compiled(*inputs)

            return run

        return backend

    def report(self) -> DiffReport:
        with self._lock:
            graphs = tuple(self.graphs)
        if self.cfg.backend is not None:
            return DiffReport(_backends.backend_name(self.cfg.backend), graphs)
        return DiffReport(", ".join(dict.fromkeys(g.backend for g in graphs)) or "the script's backend", graphs)


def config(backend: Any = "inductor", *, mode: str | None = None, training: bool = False,
           tol: Tolerance | None = None, ladder: bool = True, repro: str | None = None,
           progress: Progress | None = None, backend_ref: str | None = None, root_cause: bool = True,
           options: dict | None = None) -> DiffConfig:
    return DiffConfig(backend=backend, mode=mode, tol=tol or Tolerance(), ladder=ladder, training=training,
                      repro_dir=repro, progress=progress, backend_ref=backend_ref, root_cause=root_cause,
                      options=dict(options) if options else None)


def diff(fn: Callable[..., Any], *args: Any, backend: Any = "inductor", mode: str | None = None,
         dynamic: bool | None = None, training: bool = False, tol: Tolerance | None = None,
         ladder: bool = True, repro: str | None = None, progress: Progress | None = None,
         root_cause: bool = True, options: dict | None = None, **kwargs: Any) -> DiffReport:
    """Run `fn(*args, **kwargs)` once under torch.compile and diff every compiled graph call.

    `backend` is what you would pass to torch.compile (a name or a callable), with its `mode` or
    Inductor `options`; `training=True` also diffs the gradients of every graph input that requires
    grad; `root_cause=False` skips the ablations below the first divergent node (report.root_cause).
    Dynamo's caches are reset before and after, so `fn` is traced afresh and nothing diffed stays
    installed.
    """
    collector = Collector(config(backend, mode=mode, training=training, tol=tol, ladder=ladder,
                                 repro=repro, progress=progress, root_cause=root_cause, options=options))
    torch.compiler.reset()
    grad = torch.enable_grad() if training else torch.no_grad()
    try:   # the real torch.compile, also when a script under `dynstep diff` calls dynstep.diff itself
        compiled = (_REPLACED[-1] if _REPLACED else torch.compile)(fn, backend=collector.backend, dynamic=dynamic)
        with grad:
            compiled(*args, **kwargs)
    finally:
        torch.compiler.reset()
    return collector.report()


_REPLACED: list[Callable[..., Any]] = []   # the torch.compile each active diffing() replaced


@contextlib.contextmanager
def diffing(cfg: DiffConfig, *, calls: int = 1) -> Iterator[Collector]:
    """Within the block every `torch.compile(...)` is diffed by one Collector (restored after).

    Each call is diffed with the backend, mode and options the script gave torch.compile, unless
    `cfg` sets them (cfg.backend None: the script's own backend, "inductor" when it names none), and
    the script gets the compiled values, as it would without the diff."""
    collector = Collector(cfg, calls=calls, keep_compiled=True)
    original = torch.compile

    @functools.wraps(original)
    def compile_diffed(model: Any = None, *, backend: Any = "inductor", mode: str | None = None,
                       options: dict | None = None, **kw: Any) -> Any:
        kw = {k: v for k, v in kw.items() if k in ("fullgraph", "dynamic", "disable")}
        diffed = collector.backend_for(script_config(cfg, backend, mode, options))
        if model is None:
            return lambda m: original(m, backend=diffed, **kw)
        return original(model, backend=diffed, **kw)

    torch.compile = compile_diffed
    _REPLACED.append(original)
    try:
        yield collector
    finally:
        _REPLACED.pop()
        torch.compile = original


def script_config(cfg: DiffConfig, backend: Any, mode: str | None, options: dict | None) -> DiffConfig:
    """The diff's configuration for one torch.compile call of the script: the script's backend, mode
    and options where `cfg` leaves them open (superstep's own options name its inner compiler)."""
    if backend == "superstep":
        superstep = dict(options or {})
        backend, mode, options = superstep.get("inner", "inductor"), superstep.get("mode", mode), None
    own = cfg.backend is None or cfg.backend == backend
    return dataclasses.replace(cfg, backend=backend if cfg.backend is None else cfg.backend,
                               mode=cfg.mode if cfg.mode is not None else (mode if own else None),
                               options=cfg.options if cfg.options is not None else (options if own else None))


@dataclasses.dataclass
class _SuperstepDiffs:
    collectors: list[Collector] = dataclasses.field(default_factory=list)

    def report(self) -> DiffReport:
        graphs = tuple(g for c in self.collectors for g in c.graphs)
        name = self.collectors[0].report().backend if self.collectors else "?"
        return DiffReport(name, graphs)


SUPERSTEP = _SuperstepDiffs()


def superstep_diff(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], inner: Any,
                   mode: str | None, *, compiled: Callable[..., Any],
                   on_report: Callable[[DiffReport], None] | None = None) -> Callable[..., Any]:
    """superstep's `diff` option: diff the first call of the graph, then run `compiled` (what
    superstep built from its other options). Results: `dynstep.eagerdiff.superstep_report()`
    (and `on_report(report)`); a divergence is also raised as a warning, so it is seen inside a
    larger run."""
    collector = Collector(config(inner, mode=mode))
    SUPERSTEP.collectors.append(collector)
    first = collector.backend(gm, example_inputs)
    state = {"diffed": False}

    def run(*inputs: Any) -> Any:
        if not state["diffed"]:
            state["diffed"] = True
            first(*inputs)
            report = collector.report()
            if on_report is not None:
                on_report(report)
            if not report.ok:
                warnings.warn(report.summary(), RuntimeWarning, stacklevel=2)
        return compiled(*inputs)

    return run


def superstep_report() -> DiffReport:
    """Everything superstep's `diff` option found in this process."""
    return SUPERSTEP.report()
