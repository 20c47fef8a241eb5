"""`dynstep.step_bytecode()`: the context manager that installs the hooks and routes compiles.

    with dynstep.step_bytecode():                            # REPL on a terminal
        cfn(x, d, log)
    with dynstep.step_bytecode(commands="s; stack; n; c"):   # scripted (or DYNSTEP_COMMANDS)
        cfn(x, d, log)

To step into graphs they must have step points: while the context is open every graph Dynamo
compiles goes through superstep (``step=True``) with the user's own backend as the inner
compiler (`_compat.wrap_dynamo_compiler`). Graphs compiled before keep running as they were;
`s` at their call says so and steps over them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from .. import _compat
from ..core import wiring
from ..core.errors import UnsupportedTorch
from ..core.events import Info, emit
from ..step.stepper import STEPPER
from .hooks import installed
from .mechanism import Mechanism, choose
from .stepper import BytecodeStepper

_ACTIVE: BytecodeStepper | None = None


def active() -> BytecodeStepper | None:
    """The stepper of the open step_bytecode() block, if any."""
    return _ACTIVE


def check_supported() -> Mechanism:
    """The mechanism the stepper runs on here (`dynstep.bytecode.mechanism`); UnsupportedTorch
    naming what this torch lacks when it has no way to learn Dynamo's code objects."""
    try:
        return choose()
    except UnsupportedTorch as exc:
        raise UnsupportedTorch(f"dynstep's bytecode stepper cannot run here: {exc}. Everything else in "
                               "dynstep (probes, pauses, breakpoints, diff) works on this torch.") from None


@contextlib.contextmanager
def step_bytecode(*, commands: str | None = None, frontend: str | None = None,
                  route: bool = True) -> Iterator[BytecodeStepper]:
    """Step through Dynamo-produced bytecode run inside the block (see `dynstep.bytecode`).

    commands: scripted commands ("s; stack; c"), default DYNSTEP_COMMANDS; frontend: "repl" or
    "script", default DYNSTEP_FRONTEND, else the REPL on a terminal. route=False leaves the
    compiler alone (for `dynstep run`, which already routes every torch.compile through superstep).
    """
    global _ACTIVE
    if _ACTIVE is not None:    # nested (a script under `dynstep run --step-bytecode`): one stepper
        yield _ACTIVE
        return
    mechanism = check_supported()
    commands, frontend = _front_end_args(commands, frontend)
    shared = wiring.make_frontend(frontend, commands)
    engine = BytecodeStepper(shared, mechanism)
    if shared is None:
        emit(Info("dynstep: stdin is not a terminal and no commands were given (commands=, DYNSTEP_COMMANDS); "
                  "step_bytecode() will not stop"))
    saved = STEPPER.front_state()

    def share() -> None:
        # the runtime stepper answers node stops through the same front end (one command queue);
        # its config key is what superstep's step=True options give, so compiling keeps it
        STEPPER.share_front(frontend, commands, shared, detached=shared is None or engine.detached)

    share()
    routing = _compat.wrap_dynamo_compiler(_through_superstep(frontend, commands, share)) if route \
        else contextlib.nullcontext()
    try:
        with routing, installed(engine, mechanism):
            _ACTIVE = engine
            yield engine
    finally:
        _ACTIVE = None
        STEPPER.restore_front(saved)


def _front_end_args(commands: str | None, frontend: str | None) -> tuple[str | None, str | None]:
    commands = commands if commands is not None else (os.environ.get("DYNSTEP_COMMANDS") or None)
    frontend = frontend if frontend is not None else (os.environ.get("DYNSTEP_FRONTEND") or None)
    if frontend not in (None, "repl", "script"):
        raise ValueError(f"step_bytecode(frontend={frontend!r}): the bytecode stepper answers through 'repl' or "
                         "'script' (commands=...); frontend='pdb' is for node stops (superstep option)")
    return commands, frontend


def _through_superstep(frontend: str | None, commands: str | None,
                       share: Callable[[], None]) -> Callable[[Any], Any]:
    """compiler_fn -> a superstep backend with step points and compiler_fn as the inner compiler."""

    def wrap(compiler_fn: Any) -> Any:
        from dynstep.backends.superstep import superstep

        stepping = superstep(inner=compiler_fn, step=True, frontend=frontend, commands=commands)

        def backend(gm: Any, example_inputs: Any) -> Any:
            try:
                return stepping(gm, example_inputs)
            finally:
                share()   # a user backend that is itself superstep configured the stepper its own way

        backend.__name__ = f"superstep[{getattr(compiler_fn, '__name__', 'backend')}]"
        return backend

    return wrap
