"""dynstep: a step debugger for torch.compile.

    import torch, dynstep
    cm = torch.compile(model, backend="superstep", options={"probe": ["module:blocks.*.mlp"]})
    with dynstep.session() as s:
        cm(x)
    s.records("module:blocks.0.mlp")[0].stats["absmax"]

Importing dynstep is cheap: it imports neither Inductor nor rich; heavy modules load on use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Abort", "DynstepError", "NonFiniteError", "OptionsError", "SelectorError", "StorageError",
    "Options", "Recording", "Session", "Snapshot", "Stats",
    "breakpoint", "configure", "default_session", "load", "session", "step_bytecode", "superstep",
    "TensorProbe", "PrintAction", "RecordAction", "CheckAction", "CheckFailed", "drain_records",
    "CudaGraphTensorProbe", "TensorPrint", "TensorRecord", "TensorCompare",
    "set_record_memory_cap", "record_memory",
    "DiffReport", "NodeDiff", "diff",
]

_LAZY = {
    "Abort": "dynstep.errors", "DynstepError": "dynstep.errors", "NonFiniteError": "dynstep.errors",
    "OptionsError": "dynstep.errors", "SelectorError": "dynstep.errors", "StorageError": "dynstep.errors",
    "Options": "dynstep.options",
    "Session": "dynstep.sessions", "session": "dynstep.sessions", "default_session": "dynstep.sessions",
    "Snapshot": "dynstep.records", "Stats": "dynstep.records",
    "Recording": "dynstep.storage", "load": "dynstep.storage",
    "superstep": "dynstep.backends.superstep",
    "breakpoint": "dynstep.breakpoints", "configure": "dynstep.bp_frontend",
    "step_bytecode": "dynstep.bytecode",
    "CheckFailed": "dynstep.errors",
    "set_record_memory_cap": "dynstep.runtime", "record_memory": "dynstep.runtime",
    **{name: "dynstep.probe_api" for name in (
        "TensorProbe", "PrintAction", "RecordAction", "CheckAction", "drain_records",
        "CudaGraphTensorProbe", "TensorPrint", "TensorRecord", "TensorCompare")},
    "diff": "dynstep.eagerdiff", "DiffReport": "dynstep.eagerdiff", "NodeDiff": "dynstep.eagerdiff",
}

if TYPE_CHECKING:
    from .backends.superstep import superstep
    from .bp_frontend import configure
    from .breakpoints import breakpoint
    from .bytecode import step_bytecode
    from .eagerdiff import DiffReport, NodeDiff, diff
    from .errors import Abort, DynstepError, NonFiniteError, OptionsError, SelectorError, StorageError
    from .options import Options
    from .records import Snapshot, Stats
    from .sessions import Session, default_session, session
    from .storage import Recording, load


_SUBMODULES = {"breakpoints", "probes", "compile_stop", "stepper", "selectors", "sessions", "storage", "records"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"dynstep.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dynstep' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
