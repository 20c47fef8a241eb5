"""The slots a front end fills: the default event sink, the stop front-end factory, renderers.

The engine never imports a front end. It reaches the user through typed events (`emit`) and the
`Frontend` protocol; which terminal, debugger or editor answers is decided in one place, the
composition root `dynstep.front.wiring.install`, which fills these slots. Front ends are found
through the ``dynstep.frontends`` entry-point group (pyproject.toml) — the mechanism torch uses
to find the superstep backend — and installed the first time the engine needs one:

    wiring.default_sink()(event)                  # where events go when no sink is in use
    wiring.make_frontend("pdb", None)             # who answers a stop (None: nothing can)
    wiring.render("diff.html", report)            # a renderer a front end registered
    class DiffReport(Rendered): RENDERER = "diff"  # to_json(), to_html() and show() through them

A program that wants another front end (an editor, a notebook) calls `install_sink`,
`install_frontend_factory` and `register_renderer` itself; what it installed is kept.
"""

from __future__ import annotations

import json
import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any

log = logging.getLogger("dynstep")

GROUP = "dynstep.frontends"
Sink = Callable[[object], None]


class Frontend:
    """Answers a stop: shows it and feeds command lines to `stepper.execute` until one resumes. Every
    front end derives from it; each optional ability is declared here with the default the steppers
    rely on, so they call it without asking whether it is there.

    `stepper` is dynstep.step.stepper.Stepper (or the bytecode stepper) and `stop` a
    `dynstep.core.stop.Stop` (None at a bytecode stop).
    """

    shares_terminal = False   # a distributed job: one paused rank at a time talks to the terminal
    reads_lines = False       # `read` gives command lines (the compile-time stop reads its commands so)

    def run(self, stepper: Any, stop: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} answers no stop")

    def decide(self, stepper: Any, stop: Any) -> str | None:
        """The stop's reason as shown, or None to decline it (conditions, hit counts, logpoints)."""
        return stop.reason

    def read(self, prompt: str) -> str | None:
        """One command line (None: no more). Used when `reads_lines`."""
        return None

    def compile_stop(self, stop: Any, fake_locals: dict[str, Any]) -> None:
        """dynstep.breakpoint()'s compile-time stop answered its own way (a debugger frame holding the
        fake locals), for a front end that does not read lines; the default lets the compile go on."""


FrontendFactory = Callable[[str | None, str | None], "Frontend | None"]

_lock = threading.RLock()
_loaded = False
_sink: Sink | None = None            # the one default sink (core.events.use_sink scopes others per context)
_factory: FrontendFactory | None = None
_renderers: dict[str, Callable[..., Any]] = {}
_coordinators: Callable[[Any], Any] | None = None


def install_sink(sink: Sink, *, replace: bool = True) -> None:
    global _sink
    with _lock:
        if replace or _sink is None:
            _sink = sink


def install_frontend_factory(factory: FrontendFactory | None, *, replace: bool = True) -> None:
    global _factory
    with _lock:
        if replace or _factory is None:
            _factory = factory


def current_frontend_factory() -> FrontendFactory | None:
    """The factory installed now (a front end that takes over saves it to give it back later)."""
    _load()
    return _factory


def register_renderer(name: str, fn: Callable[..., Any], *, replace: bool = True) -> None:
    with _lock:
        if replace or name not in _renderers:
            _renderers[name] = fn


def install_coordinator_factory(factory: Callable[[Any], Any] | None, *, replace: bool = True) -> None:
    """How a distributed job's coordinator is made for the stepper's slot: ``factory(ranks)`` returns
    one (dynstep.jobs.coordinator.for_job), or None in a single process."""
    global _coordinators
    with _lock:
        if replace or _coordinators is None:
            _coordinators = factory


def make_coordinator(ranks: Any) -> Any:
    """A coordinator for `ranks` (the parsed option) in a distributed job, else None."""
    _load()
    return _coordinators(ranks) if _coordinators is not None else None


def _load() -> None:
    """Run every installer of the entry-point group once (the composition root)."""
    global _loaded
    with _lock:
        if _loaded:
            return
        _loaded = True
        from importlib.metadata import entry_points

        found = sorted(entry_points(group=GROUP), key=lambda e: e.name)
        for ep in found:
            try:
                ep.load()()
            except Exception as exc:   # a broken front-end plugin must not take the program down
                log.warning("dynstep: front end %r (%s) failed to install: %r", ep.name, ep.value, exc)
        if not found:
            warnings.warn(f"dynstep: no front end is installed (entry-point group {GROUP!r} is empty; "
                          "install dynstep with pip, e.g. pip install -e .): events are dropped and stops "
                          "do not wait", RuntimeWarning, stacklevel=3)


def default_sink() -> Sink:
    _load()
    return _sink or _drop


def make_frontend(kind: str | None, commands: str | None) -> "Frontend | None":
    _load()
    return _factory(kind, commands) if _factory is not None else None


def render(name: str, *args: Any, **kwargs: Any) -> Any:
    _load()
    fn = _renderers.get(name)
    if fn is None:
        raise RuntimeError(f"dynstep: no renderer {name!r} is installed (known: {sorted(_renderers)}); "
                           f"front ends register theirs through the {GROUP!r} entry points")
    return fn(*args, **kwargs)


class Rendered:
    """A result a user saves and looks at (`DiffReport`, `Comparison`): `to_json` writes its `to_dict`,
    `to_html` and `show` go through the renderers a front end registered as "<RENDERER>.html" and
    "<RENDERER>.show"."""

    RENDERER = ""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self, path: str | None = None, *, indent: int = 2) -> str:
        """The result as JSON text (also written to `path` when given)."""
        return _written(json.dumps(self.to_dict(), indent=indent), path)

    def to_html(self, path: str | None = None) -> str:
        """A self-contained HTML page, from the renderer "<RENDERER>.html" (also written to `path` when given)."""
        return _written(render(f"{self.RENDERER}.html", self), path)

    def show(self, console: Any = None) -> None:
        """The result in the terminal, from the renderer "<RENDERER>.show"."""
        render(f"{self.RENDERER}.show", self, console=console)


def _written(text: str, path: str | None) -> str:
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return text


def _drop(event: object) -> None:
    return None
