"""dynstep: a step debugger for torch.compile.

    import torch, dynstep
    cm = torch.compile(model, backend="superstep", options={"probe": ["module:blocks.*.mlp"]})
    with dynstep.session() as s:
        cm(x)
    s.records("module:blocks.0.mlp")[0].stats["absmax"]

Importing dynstep is cheap: it imports neither Inductor nor rich; heavy modules load on use.

Layout (one room per capability; docs/architecture.md has the data path and the rules):
core (vocabulary), graph (reading graphs, selectors), ops (op schemas, native loader), probe
(run-time probes, sessions, recordings), step (stepper, breakpoints), bytecode (the bytecode
stepper), eagerdiff (the diff engine), crossrun (two recorded runs compared node by node), dap
(the Debug Adapter Protocol server), mixed (from a paused node into its native kernel: `native`,
`dynstep gdb`), front (every front end, the composition root), and
`dynstep.backends` (superstep and its graph passes; the top-level `backends/` folder).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Abort", "DynstepError", "NonFiniteError", "OptionsError", "SelectorError", "SessionError", "StorageError",
    "Options", "Recording", "Session", "Snapshot", "Stats",
    "breakpoint", "configure", "default_session", "load", "session", "step_bytecode", "superstep",
    "TensorProbe", "PrintAction", "RecordAction", "CheckAction", "CheckFailed", "drain_records",
    "CudaGraphTensorProbe", "TensorPrint", "TensorRecord", "TensorCompare",
    "set_record_memory_cap", "record_memory",
    "DiffReport", "NodeDiff", "diff",
    "serve_dap",
    "Comparison", "compare",
]

_LAZY = {
    **{name: "dynstep.core.errors" for name in (
        "Abort", "DynstepError", "NonFiniteError", "OptionsError", "SelectorError", "SessionError", "StorageError",
        "CheckFailed")},
    "Options": "dynstep.core.options",
    "Snapshot": "dynstep.core.records", "Stats": "dynstep.core.records",
    "Session": "dynstep.probe.sessions", "session": "dynstep.probe.sessions",
    "default_session": "dynstep.probe.sessions",
    "Recording": "dynstep.recording.reader", "load": "dynstep.recording.reader",
    "set_record_memory_cap": "dynstep.probe.rings", "record_memory": "dynstep.probe.rings",
    **{name: "dynstep.probe.api" for name in (
        "TensorProbe", "PrintAction", "RecordAction", "CheckAction", "drain_records",
        "CudaGraphTensorProbe", "TensorPrint", "TensorRecord", "TensorCompare")},
    "superstep": "dynstep.backends.superstep",
    "breakpoint": "dynstep.step.breakpoints", "configure": "dynstep.step.bp_stops",
    "step_bytecode": "dynstep.bytecode",
    "diff": "dynstep.eagerdiff", "DiffReport": "dynstep.eagerdiff", "NodeDiff": "dynstep.eagerdiff",
    "serve_dap": "dynstep.dap.api",
    "compare": "dynstep.crossrun", "Comparison": "dynstep.crossrun",
}

# Modules reachable as attributes under their public (and earlier) names: dynstep.probes.disable(),
# dynstep.breakpoints.enable(), ...
_MODULES = {
    "probes": "dynstep.probe.switch", "breakpoints": "dynstep.step.breakpoints",
    "compile_stop": "dynstep.step.compile_stop", "stepper": "dynstep.step.stepper",
    "selectors": "dynstep.graph.selectors", "sessions": "dynstep.probe.sessions",
    "storage": "dynstep.recording.storage", "records": "dynstep.core.records",
    "flight": "dynstep.flight",   # dynstep.flight.watch(), .dump(), .replay()
}

if TYPE_CHECKING:
    from .backends.superstep import superstep
    from .bytecode import step_bytecode
    from .core.errors import (Abort, CheckFailed, DynstepError, NonFiniteError, OptionsError, SelectorError,
                              SessionError, StorageError)
    from .core.options import Options
    from .core.records import Snapshot, Stats
    from .crossrun import Comparison, compare
    from .eagerdiff import DiffReport, NodeDiff, diff
    from .probe.api import (CheckAction, CudaGraphTensorProbe, PrintAction, RecordAction, TensorCompare, TensorPrint,
                            TensorProbe, TensorRecord, drain_records)
    from .probe.rings import record_memory, set_record_memory_cap
    from .probe.sessions import Session, default_session, session
    from .recording.reader import Recording, load
    from .dap.api import serve_dap
    from .step.bp_stops import configure
    from .step.breakpoints import breakpoint


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        module = importlib.import_module(_MODULES[name])
        globals()[name] = module
        return module
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dynstep' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
