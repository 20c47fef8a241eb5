"""Exceptions dynstep raises into user code.

Every error says what was wrong, what was expected, and where (the user's source line when
there is one)::

    try:
        loss = cm(x)
    except dynstep.NonFiniteError as e:
        print(e.node, e.source, e.module)
"""

from __future__ import annotations


class DynstepError(Exception):
    """Base class for every error dynstep raises on purpose."""


class SelectorError(DynstepError, ValueError):
    """A selector string does not follow the grammar."""


class OptionsError(DynstepError, ValueError):
    """A superstep option has the wrong name, type or value."""


class StorageError(DynstepError, OSError):
    """A recording file could not be written or read."""


class SessionError(DynstepError, RuntimeError):
    """A session was used the wrong way (entered twice, exited in another thread)."""


class NonFiniteError(DynstepError, FloatingPointError):
    """A probed value contained NaN or Inf and the `nan` action was asked to raise."""

    def __init__(self, message: str, *, node: str, target: str, source: str, module: str,
                 graph: str, nan: int, inf: int, rank: int = 0) -> None:
        super().__init__(message)
        self.node = node
        self.target = target
        self.source = source
        self.module = module
        self.graph = graph
        self.nan = nan
        self.inf = inf
        self.rank = rank     # the rank of a distributed job that saw it (0 in one process)


class UnsupportedTorch(DynstepError, RuntimeError):
    """The installed torch lacks a hook a dynstep feature is built on (the message names it)."""


class CheckFailed(DynstepError, AssertionError):
    """A TensorProbe's CheckAction saw values that differ from the expected ones, or non-finite ones."""


class Abort(BaseException):
    """The user asked the debugger to stop the program (`quit` at a stop).

    Like KeyboardInterrupt and SystemExit it derives from BaseException: a quit must not be
    swallowed by an `except Exception` in user code, nor wrapped by Dynamo when it happens at a
    compile-time stop (torch/_dynamo/convert_frame.py wraps Exceptions in InternalTorchDynamoError).
    """
