"""`dynstep run`: run a script with every `torch.compile` routed through superstep.

    dynstep run train.py --lr 3e-4 --pause "module:blocks.2.attn"
    dynstep run -m mypkg.train --probe "op:layer_norm" --commands "p value.std(); c"

The script's own backend and mode become superstep's `inner` and `mode` (unless `--inner`
overrides them); the script's stdout, argv, `__name__ == "__main__"` and exit code are its own.
`torch.compile` is patched only inside `routed_compile()` and restored in `finally`.

Graph breaks and recompiles are collected for the whole run (`dynstep.recording.compile_log`) and
shown on stderr at the end, each once with its count and user line; with ``explain=True`` each is
shown as it happens instead. ``record=PATH`` streams every probe hit and compile event to a
recording (`dynstep report PATH` then draws it).

    with routed_compile({"pause": ["module:blocks.0"]}):
        runpy.run_path("train.py", run_name="__main__")
"""

from __future__ import annotations

import contextlib
import os
import runpy
import signal
import sys
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from ..core.errors import Abort, StorageError
from ..core.sites import SITES
from ..probe.sessions import session
from ..step.stepper import STEPPER


def backend_for(backend: Any, mode: str | None, options: Mapping[str, Any] | None,
                overrides: Mapping[str, Any]) -> Any:
    """The superstep backend that stands in for ``torch.compile(backend=backend, mode=mode, options=options)``."""
    from dynstep.backends.superstep import superstep

    if backend == "superstep":
        merged = {**(options or {}), **overrides}
        return superstep(**merged, **({"mode": mode} if mode else {}))
    if options:
        warnings.warn(f"dynstep run: the script's options= for backend {backend!r} are not passed on "
                      f"(superstep takes its own options); ignoring {sorted(options)}", UserWarning, stacklevel=3)
    merged = {"inner": backend, **overrides}
    return superstep(**merged, **({"mode": mode} if mode else {}))


@contextlib.contextmanager
def routed_compile(overrides: Mapping[str, Any]) -> Iterator[None]:
    """Patch `torch.compile` so every call compiles through superstep with `overrides`."""
    original = torch.compile

    def compile(model: Any = None, *, backend: Any = "inductor", mode: str | None = None,
                options: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        if model is None:   # @torch.compile(...) used as a decorator factory
            return lambda fn: compile(fn, backend=backend, mode=mode, options=options, **kwargs)
        return original(model, backend=backend_for(backend, mode, options, overrides), **kwargs)

    compile.__doc__ = original.__doc__
    torch.compile = compile
    try:
        yield
    finally:
        torch.compile = original


@contextlib.contextmanager
def _argv(argv: Sequence[str], path0: str | None) -> Iterator[None]:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = list(argv)
    if path0 is not None:
        sys.path.insert(0, path0)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


@contextlib.contextmanager
def _interrupt_steps() -> Iterator[None]:
    """First Ctrl-C while running: stop at the next stop point; a second one: KeyboardInterrupt."""
    def handler(signum: int, frame: Any) -> None:
        stepping = any(s.kind == "pause" for s in SITES.all())
        if not stepping or STEPPER.mode == "step" or STEPPER.current is not None:
            raise KeyboardInterrupt
        STEPPER.resume("step")
        print("\ndynstep: interrupted; stopping at the next node (Ctrl-C again to stop the program)",
              file=sys.stderr)

    if not sys.stdin or not sys.stdin.isatty():
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _bytecode_stepping(enabled: bool, overrides: Mapping[str, Any]) -> Iterator[None]:
    """``--step-bytecode``: the whole run inside dynstep.step_bytecode(); routed_compile already
    sends every graph through superstep, with step points (``step`` is in the overrides)."""
    if not enabled:
        yield
        return
    from ..bytecode import step_bytecode

    with step_bytecode(commands=overrides.get("commands"), frontend=overrides.get("frontend"), route=False):
        yield


@contextlib.contextmanager
def _compile_events(explain: bool) -> Iterator[None]:
    """Collect compile events for the run; show them live (explain) or at the end."""
    from ..recording.compile_log import COMPILE_LOG, collecting
    from ..recording.facts import CompileEvent
    from .report_show import explain as show_one, show_compile_events

    seen: list[CompileEvent] = []

    def on_entry(entry: object) -> None:
        if isinstance(entry, CompileEvent):
            seen.append(entry)
            if explain:
                show_one(entry)

    with collecting():
        remove = COMPILE_LOG.listen(on_entry)
        try:
            yield
        finally:
            remove()
            if not explain:
                show_compile_events(seen)


@contextlib.contextmanager
def _stages(dump: str | None) -> Iterator[None]:
    """Every stage of every compile, for `code` at a stop; with ``--dump DIR`` written there at the end
    (compiled with Inductor's provenance, and without the caches that would skip a stage)."""
    from ..stages.capture import capturing

    if dump is None:
        with capturing():
            yield
        return
    from .. import _compat
    from ..mixed.provenance import tracking
    from ..stages.dump import write_dump

    try:
        with capturing(), tracking(), _compat.fresh_compiles():
            yield
    finally:
        try:
            files = write_dump(dump)
            print(f"dynstep: {len(files)} stage file(s) of the run in {dump} (index.txt lists them)", file=sys.stderr)
        except (OSError, StorageError) as exc:
            print(f"dynstep run --dump: could not write {dump}: {exc}", file=sys.stderr)


def dump_folder(dump: str | None) -> str | None:
    """A rank of a distributed job dumps into DUMP/rank<N> (torchrun sets RANK and WORLD_SIZE)."""
    if dump is None or int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return dump
    return os.path.join(dump, f"rank{os.environ.get('RANK', '0')}")


@contextlib.contextmanager
def _native_tracking(enabled: bool) -> Iterator[None]:
    """``--native`` (what `dynstep gdb` runs): every Inductor graph of the run keeps its node -> kernel
    provenance, so `native` works at any stop (superstep turns it on only for graphs with stop points)."""
    if not enabled:
        yield
        return
    from ..mixed.provenance import tracking
    from .gdb_launch import die_with_debugger

    die_with_debugger()
    with tracking():
        yield


def run(target: str, args: Sequence[str], overrides: Mapping[str, Any], *, module: bool = False,
        step_bytecode: bool = False, dap: Mapping[str, Any] | None = None, native: bool = False,
        explain: bool = False, record: str | None = None, dump: str | None = None) -> int:
    """Run a script (or ``-m`` module) as ``__main__``; returns its exit code.

    dap: ``{"address": "5679" | "HOST:PORT", "token": str | None, "wait": bool}`` serves the Debug
    Adapter Protocol for the run (the client gets `exited` with the script's exit code at the end);
    record: stream every probe hit and compile event into that recording; explain: show graph breaks
    and recompiles as they happen (else a summary at the end); dump: write every stage of every compile
    into that folder at the end (`dynstep.stages.dump`)."""
    if step_bytecode:
        if not _bytecode_stepper_runs():
            return 2
        overrides = {**overrides, "step": True}
    if not module and not os.path.isfile(target):
        print(f"dynstep run: no such script {target!r}", file=sys.stderr)
        return 2
    STEPPER.reset()
    path0 = os.getcwd() if module else os.path.dirname(os.path.abspath(target))
    try:   # the recording is made (or refused) before the script starts
        recording = session(path=record, name="dynstep run") if record else contextlib.nullcontext()
    except StorageError as exc:
        print(f"dynstep run: --record: {exc}", file=sys.stderr)
        return 2
    dump = dump_folder(dump)
    if (dump is not None and not _dump_usable(dump)) or (dap is not None and not _serve(dap)):
        return 2
    code = 1
    try:
        with recording, _compile_events(explain), _stages(dump), _argv([target, *args], path0), \
                routed_compile(overrides), _interrupt_steps(), _bytecode_stepping(step_bytecode, overrides), \
                _native_tracking(native):
            code = _run_main(target, module)
            return code
    finally:
        if dap is not None:
            from ..dap.api import stop_serving

            stop_serving(code)


def _dump_usable(dump: str) -> bool:
    """--dump DIR: absent, empty or an earlier dump, checked before the script starts (said why not)."""
    from ..stages.dump import check_folder

    try:
        check_folder(dump)
    except StorageError as exc:
        print(f"dynstep run: {exc}", file=sys.stderr)
        return False
    return True


def _bytecode_stepper_runs() -> bool:
    """--step-bytecode: whether the bytecode stepper runs on this torch/Python (said why not)."""
    from ..bytecode.mechanism import unavailable

    missing = unavailable()
    if missing is not None:
        print(f"dynstep run --step-bytecode: the bytecode stepper cannot run here: {missing}", file=sys.stderr)
    return missing is None


def _serve(dap: Mapping[str, Any]) -> bool:
    """Start the DAP server (and wait for a client with --wait); False, said why, when it cannot."""
    from ..dap.api import serve_dap

    try:
        serve_dap(dap["address"], token=dap.get("token"), wait=bool(dap.get("wait")))
    except (OSError, ValueError) as exc:
        print(f"dynstep run --dap {dap['address']}: cannot serve the debug adapter protocol: {exc}", file=sys.stderr)
        return False
    return True


def _run_main(target: str, module: bool) -> int:
    """Run the target as __main__ and turn how it ended into an exit code."""
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc.code)
    except Abort as exc:
        print(f"dynstep: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("KeyboardInterrupt", file=sys.stderr)
        return 130
    except BaseException as exc:
        _flight_exception(exc)
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
    return 0


def _flight_exception(exc: BaseException) -> None:
    """The script ended with an exception: the flight recorder's `exception` trigger (sys.excepthook,
    which it also hooks, is not reached under `dynstep run`)."""
    from ..flight import current

    recorder = current()
    if recorder is not None and isinstance(exc, Exception):
        recorder.on_exception(exc)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
