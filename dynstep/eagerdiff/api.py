"""Entry points of the diff: `diff(fn, *args)`, the `diffing()` patch used by `dynstep diff
SCRIPT`, and the hook behind superstep's `options={"diff": True}`.

    report = dynstep.diff(model, x, backend="inductor")
    with diffing(DiffConfig(backend="inductor")) as collector:   # every torch.compile is diffed
        runpy.run_path("train.py", run_name="__main__")
    collector.report().ok

Each compiled graph is handed to a `Collector`, whose backend diffs the first `calls` calls of
the graph (compiling probed copies as the engine needs) and then runs the graph eagerly, so the
program goes on with reference values.
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
from .judge import Tolerance
from .report import DiffReport, GraphDiff


class Collector:
    """A torch.compile backend that diffs every graph it is given and keeps the results."""

    def __init__(self, cfg: DiffConfig, *, calls: int = 1) -> None:
        self.cfg, self.calls = cfg, calls
        self.graphs: list[GraphDiff] = []
        self._lock = threading.Lock()
        self._count = 0

    def backend(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
        name = gi.graph_id(gm, _compat.current_compile_id())
        gi.name_modules(gm)   # module paths as the user writes them, read when the graph is diffed
        calls = [0]

        def run(*inputs: Any) -> Any:
            if calls[0] < self.calls:
                gd = diff_graph(gm, inputs, self.cfg, graph=name, call=calls[0])
                with self._lock:
                    self.graphs.append(gd)
            calls[0] += 1
            return gm(*inputs)

        return run

    def report(self) -> DiffReport:
        with self._lock:
            return DiffReport(_backends.backend_name(self.cfg.backend), tuple(self.graphs))


def config(backend: Any = "inductor", *, mode: str | None = None, training: bool = False,
           tol: Tolerance | None = None, ladder: bool = True, repro: str | None = None,
           progress: Progress | None = None, backend_ref: str | None = None) -> DiffConfig:
    return DiffConfig(backend=backend, mode=mode, tol=tol or Tolerance(), ladder=ladder, training=training,
                      repro_dir=repro, progress=progress, backend_ref=backend_ref)


def diff(fn: Callable[..., Any], *args: Any, backend: Any = "inductor", mode: str | None = None,
         dynamic: bool | None = None, training: bool = False, tol: Tolerance | None = None,
         ladder: bool = True, repro: str | None = None, progress: Progress | None = None,
         **kwargs: Any) -> DiffReport:
    """Run `fn(*args, **kwargs)` once under torch.compile and diff every compiled graph call.

    `backend` is what you would pass to torch.compile (a name or a callable); `training=True`
    also diffs the gradients of every graph input that requires grad. Dynamo's caches are reset
    before and after, so `fn` is traced afresh and nothing diffed stays installed.
    """
    collector = Collector(config(backend, mode=mode, training=training, tol=tol, ladder=ladder,
                                 repro=repro, progress=progress))
    torch.compiler.reset()
    grad = torch.enable_grad() if training else torch.no_grad()
    try:
        compiled = torch.compile(fn, backend=collector.backend, dynamic=dynamic)
        with grad:
            compiled(*args, **kwargs)
    finally:
        torch.compiler.reset()
    return collector.report()


@contextlib.contextmanager
def diffing(cfg: DiffConfig, *, calls: int = 1) -> Iterator[Collector]:
    """Within the block every `torch.compile(...)` is diffed by one Collector (restored after)."""
    collector = Collector(cfg, calls=calls)
    original = torch.compile

    @functools.wraps(original)
    def compile_diffed(model: Any = None, **kw: Any) -> Any:
        kw = {k: v for k, v in kw.items() if k in ("fullgraph", "dynamic", "disable")}
        if model is None:
            return lambda m: original(m, backend=collector.backend, **kw)
        return original(model, backend=collector.backend, **kw)

    torch.compile = compile_diffed
    try:
        yield collector
    finally:
        torch.compile = original


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
