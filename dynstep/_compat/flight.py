"""What the flight recorder (dynstep/flight/) reads of torch beyond its public API."""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Iterator
from typing import Any


def tensor_version(t: Any) -> int:
    # torch/csrc/autograd/python_variable.cpp: Tensor._version, the version counter every in-place
    # op bumps (what autograd checks saved tensors with); no public getter exists
    return int(t._version)


@contextlib.contextmanager
def inductor_fallback_random() -> Iterator[None]:
    # torch/_inductor/config.py: fallback_random makes Inductor draw random numbers through eager's
    # generator (aten.rand & co.) instead of its own Philox kernels: a replay restores the CPU
    # generator's state and eager and compiled then draw the same numbers
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fallback_random=True):
        yield


def in_dynamo_guard(frame: types.FrameType | None) -> bool:
    """Whether Python code runs here on behalf of a Dynamo guard check (the frame or a caller of it).

    torch/csrc/dynamo/guards.cpp: LAMBDA_GUARD::check_nopybind calls a Python guard function and, when it
    raises, clears the error (PyErr_Clear) and fails the guard; the guard functions are closures defined in
    torch/_dynamo/guards.py (GuardBuilder: AUTOGRAD_SAVED_TENSORS_HOOKS, GRAD_MODE, ... add_lambda_guard).
    A KeyboardInterrupt raised in one is lost: Dynamo recompiles and the program runs on."""
    guards = sys.modules.get("torch._dynamo.guards")
    if guards is None or not getattr(guards, "__file__", None):
        return False            # no guard was ever built in this process
    source = os.path.normcase(os.path.realpath(guards.__file__))
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith("guards.py") and os.path.normcase(os.path.realpath(name)) == source:
            return True
        frame = frame.f_back
    return False
