"""Install and remove the hooks the bytecode stepper runs on, always in a `finally`.

Inside `installed(engine, mechanism)`:

- a source of the code objects Dynamo produced (`mechanism.codes`, `dynstep.bytecode.mechanism`):
  torch's bytecode-debugger callback (`_compat.set_dynamo_code_callback`), called with each one right
  before it runs, also ones compiled before the stepper started; or Dynamo's bytecode hook
  (`_compat.register_dynamo_bytecode_hook`), called with each one as Dynamo makes it (a resume
  function when it is first compiled), plus every one Dynamo made before the block
  (`_compat.dynamo_output_codes`);
- per-instruction events for exactly those code objects (`dynstep.bytecode.tracing`: settrace on
  3.11, sys.monitoring on 3.12+ under a tool id other than the debugger's), taken away while torch
  compiles (`_compat.compile_callbacks`: Dynamo's frame compiles, AOTAutograd's lazy backward
  compile), so a compile inside `step_bytecode()` costs what it costs outside it.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator

from .. import _compat
from .mechanism import Mechanism
from .tracing import Engine, events_for


@contextlib.contextmanager
def installed(engine: Engine, mechanism: Mechanism) -> Iterator[None]:
    # torch's callback announces each code object right before it runs: 3.11 traces only from then on
    events = events_for(engine, on_demand=mechanism.codes == "callback")
    events.start()
    try:
        with _compat.compile_callbacks(events.suspend, events.resume), code_source(mechanism.codes, events.on_code):
            yield
    finally:
        events.stop()


@contextlib.contextmanager
def code_source(kind: str, on_code: Callable[[types.CodeType], None]) -> Iterator[None]:
    """Hand `on_code` every code object Dynamo produced ("callback" or "hook", see the docstring)."""
    if kind == "callback":
        previous = _compat.set_dynamo_code_callback(on_code)
        try:
            yield
        finally:
            _compat.set_dynamo_code_callback(previous)
        return
    handle = _compat.register_dynamo_bytecode_hook(on_code)
    try:
        # registered first, then the earlier ones: a code made in between is seen (twice, harmlessly)
        for code in _compat.dynamo_output_codes():
            on_code(code)
        yield
    finally:
        handle.remove()
