"""The pytest plugin (entry point ``pytest11``): compare your tests' compiled code with eager.

    pytest --dynstep-compare=inductor                      # tests marked @pytest.mark.dynstep
    pytest --dynstep-compare=inductor --dynstep-record=failed/   # and a recording per failing test

In a test marked ``@pytest.mark.dynstep`` (``backend=``, ``rtol=``, ``atol=`` override the
command line), every ``torch.compile(...)`` compiles with the chosen backend, and each call of the
result runs eagerly as well; the compiled result is returned, so the test goes on as written. On
a mismatch the test fails with what differs and the diff's first divergent node, its user line
and error figures, instead of a bare allclose failure. The ``dynstep_compare(fn, *args)``
fixture does one such comparison explicitly (backend: the option, the marker, else inductor).

Loading the plugin imports neither torch nor the rest of dynstep: a pytest run that does not use
it pays nothing. Without ``--dynstep-compare`` marked tests run unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

_COMPARE = "--dynstep-compare"
_RECORD = "--dynstep-record"
_REAL_COMPILE: list[Any] = []        # the real torch.compile while a test's calls are patched


class DynstepMismatch(AssertionError):
    """A compiled call that does not match eager (an AssertionError: pytest shows it as a failure)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dynstep", "compare torch.compile with eager (dynstep)")
    group.addoption(_COMPARE, metavar="BACKEND", default=None,
                    help="run tests marked @pytest.mark.dynstep eagerly and compiled with BACKEND, and compare")
    group.addoption(_RECORD, metavar="DIR", default=None,
                    help="keep a dynstep recording of every failing comparison in DIR (dynstep report DIR/...)")
    group.addoption("--dynstep-rtol", type=float, default=None, help="relative tolerance (default: torch.testing's)")
    group.addoption("--dynstep-atol", type=float, default=None, help="absolute tolerance (default: torch.testing's)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "dynstep(backend=None, rtol=None, atol=None): compare torch.compile with "
                                       "eager in this test when pytest runs with --dynstep-compare=BACKEND")


def pytest_report_header(config: pytest.Config) -> str | None:
    backend = config.getoption(_COMPARE)
    return f"dynstep: comparing torch.compile(backend={backend!r}) with eager in @pytest.mark.dynstep tests" \
        if backend else None


def _settings(item: pytest.Item, default_backend: str | None) -> dict[str, Any]:
    marker = item.get_closest_marker("dynstep")
    given = dict(marker.kwargs) if marker is not None else {}
    config = item.config
    return {"backend": given.get("backend") or config.getoption(_COMPARE) or default_backend,
            "rtol": given.get("rtol", config.getoption("--dynstep-rtol")),
            "atol": given.get("atol", config.getoption("--dynstep-atol")),
            "record": config.getoption(_RECORD), "test": item.nodeid}


@contextlib.contextmanager
def _quiet_trace_logger() -> Iterator[None]:
    """pytest attaches its log-capture handlers to every logger that does not propagate, torch's
    structured-trace logger too: torch then builds every trace payload, and a failure shows
    thousands of its DEBUG lines. Detach pytest's own handlers from that logger meanwhile."""
    logger = logging.getLogger("torch.__trace")
    ours = [h for h in logger.handlers if type(h).__module__.startswith("_pytest")]
    for handler in ours:
        logger.removeHandler(handler)
    try:
        yield
    finally:
        for handler in ours:
            if handler not in logger.handlers:
                logger.addHandler(handler)


def _wants(item: pytest.Item) -> bool:
    return item.get_closest_marker("dynstep") is not None or "dynstep_compare" in getattr(item, "fixturenames", ())


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if not _wants(item):
        yield
        return
    with _quiet_trace_logger():
        if item.get_closest_marker("dynstep") is None or not item.config.getoption(_COMPARE):
            yield
            return
        import torch

        torch.compiler.reset()
        try:
            with _compiles_compared(_settings(item, None)):
                yield
        finally:
            torch.compiler.reset()


@pytest.fixture
def dynstep_compare(request: pytest.FixtureRequest):
    """``dynstep_compare(fn, *args, **kwargs)``: fn's compiled result, or a failure naming where it parts from eager."""
    import torch

    settings = _settings(request.node, "inductor")
    torch.compiler.reset()

    def compare(fn: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return _checked(fn, args, kwargs, torch.compile(fn, backend=settings["backend"]), settings)

    with _quiet_trace_logger():
        yield compare
    torch.compiler.reset()


class _Compared:
    """What the patched torch.compile returns: calls compare; anything else reaches the compiled object."""

    def __init__(self, original: Any, compiled: Any, settings: dict[str, Any]) -> None:
        self._original, self._compiled, self._settings = original, compiled, settings

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return _checked(self._original, args, kwargs, self._compiled, self._settings)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)


@contextlib.contextmanager
def _compiles_compared(settings: dict[str, Any]) -> Iterator[None]:
    import torch

    real = torch.compile

    def compile(model: Any = None, **kwargs: Any) -> Any:
        if model is None:   # @torch.compile(...) as a decorator factory
            return lambda fn: compile(fn, **kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("backend", "options", "mode")}
        return _Compared(model, real(model, backend=settings["backend"], **kwargs), settings)

    _REAL_COMPILE.append(real)
    torch.compile = compile
    try:
        yield
    finally:
        torch.compile = real
        _REAL_COMPILE.pop()


@contextlib.contextmanager
def _real_compile() -> Iterator[None]:
    import torch

    if not _REAL_COMPILE:
        yield
        return
    patched, torch.compile = torch.compile, _REAL_COMPILE[-1]
    try:
        yield
    finally:
        torch.compile = patched


def _checked(fn: Any, args: tuple, kwargs: dict, compiled: Any, settings: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    from ..eagerdiff.compare import compare_call, localise

    output, mismatch = compare_call(fn, args, kwargs, compiled=compiled, backend=settings["backend"],
                                    rtol=settings["rtol"], atol=settings["atol"])
    if mismatch is None:
        return output
    with _real_compile():
        node, note = localise(fn, args, kwargs, backend=settings["backend"])
        recording = _record(fn, args, kwargs, settings) if settings["record"] else ""
    raise DynstepMismatch(_message(mismatch, node, note, recording))


def _message(mismatch: Any, node: Any, note: str, recording: str) -> str:
    lines = [f"dynstep: torch.compile(backend={mismatch.backend!r}) of {mismatch.name} differs from eager"]
    lines += [f"  output {d.index}: {d.text}" if d.index >= 0 else f"  {d.text}" for d in mismatch.outputs]
    if node is not None:
        text = f"  `{node.source_text}`" if node.source_text else ""
        lines.append(f"  first divergent node: {node.where}{text}")
        lines.append(f"    error vs float64 {node.error:.3g} (eager's own {node.ref_error:.3g}, budget {node.budget:.3g}); "
                     f"max abs {node.max_abs:.4g}, max rel {node.max_rel:.4g}, cosine {node.cosine:.6g}")
    else:
        lines.append(f"  first divergent node: not found ({note})")
    if recording.startswith("not written"):
        lines.append(f"  recording: {recording}")
    elif recording:
        lines.append(f"  recording: {recording}  (dynstep report {recording})")
    return "\n".join(lines)


def _record(fn: Any, args: tuple, kwargs: dict, settings: dict[str, Any]) -> str:
    """A recording of the compiled call with every node probed, named after the test."""
    import torch

    from ..eagerdiff.compare import copy_inputs
    from ..probe.sessions import session

    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", settings["test"]).strip("_") + ".dynstep"
    path = os.path.join(settings["record"], name)
    os.makedirs(settings["record"], exist_ok=True)
    torch.compiler.reset()
    try:
        probed = torch.compile(fn, backend="superstep",
                               options={"inner": settings["backend"], "probe": ["*"], "actions": ["summary"]})
        with session(path=path, name=settings["test"]), torch.no_grad():
            probed(*copy_inputs(args), **copy_inputs(kwargs))
    except Exception as exc:   # the comparison's verdict stands; the recording is a help
        return f"not written ({type(exc).__name__}: {exc})"
    finally:
        torch.compiler.reset()
    return path
