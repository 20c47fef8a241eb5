"""The call Inductor's Python wrapper makes for `dynstep::probe`, without the dispatcher's Python path.

Inductor writes every extern op as `torch.ops.dynstep.probe.default(buf0, 3)` in the Python
wrapper of a compiled graph. That line parses its arguments against the op schema, boxes them,
computes the dispatch key set and releases the GIL, which costs several times what the native
kernel does on a small tensor. With this module installed the generated code reads instead

    from dynstep.fastpath import probe as dynstep_probe
    ...
    dynstep_probe(buf0, 3)

where `probe` is the native extension's direct entry (csrc/probe_cpu.cpp: probe_direct): the CPU
kernel called straight from Python, or the dispatcher for anything it must not bypass (CUDA
tensors, tensor subclasses, fake tensors, an active TorchDispatchMode). Without the native
kernel, `probe` is the op itself, so a cached graph compiled in another process still runs.
`dynstep.fastpath` is the stable import path the generated code names; it registers the
kernels (`dynstep.probe.registration.ensure`, which binds `probe` here) before handing `probe` out.
Ordering is unchanged: Inductor keeps the op an effectful extern kernel and only the text of
its one line changes. The C++ wrapper (`cpp_wrapper=True`) keeps its own dispatcher call.
`DYNSTEP_FAST_PROBE=0` keeps Inductor's op call (a kill switch, and the baseline of
`bench/probe_overhead.py`).

    from dynstep.probe import fastpath
    fastpath.install()           # idempotent; dynstep does it when Inductor compiles a probe
    fastpath.status()            # what `dynstep doctor` prints
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

from .. import _compat
from ..core.options import switched_off
from ..ops import schema

KERNEL_NAME = "torch.ops.dynstep.probe.default"
IMPORT_LINE = "from dynstep.fastpath import probe as dynstep_probe"
PUBLISH_KERNEL_NAME = "torch.ops.dynstep.publish.default"
PUBLISH_IMPORT_LINE = "from dynstep.fastpath import publish as dynstep_publish"


probe: Callable[..., None] = schema.probe   # bound to the native direct entry by kernel.ensure()
publish: Callable[..., None] = schema.publish   # the same for fused summaries (backends/stats_pass.py)
_installed = False


def bind(direct: Callable[..., None] | None, direct_publish: Callable[..., None] | None = None) -> None:
    """Call `direct` (the native extension's entries) instead of the ops from now on."""
    global probe, publish
    probe = direct if direct is not None else schema.probe
    publish = direct_publish if direct_publish is not None else schema.publish


def codegen(node: Any, writeline: Callable[[str], None]) -> None:
    """Write the wrapper line for one `dynstep::probe` fallback kernel node."""
    _compat.wrapper_import(IMPORT_LINE)
    writeline(f"dynstep_probe({', '.join(_compat.extern_kernel_args(node))})")


def publish_codegen(node: Any, writeline: Callable[[str], None]) -> None:
    """Write the wrapper line for one `dynstep::publish` node (the fused statistics of a run of probes)."""
    _compat.wrapper_import(PUBLISH_IMPORT_LINE)
    writeline(f"dynstep_publish({', '.join(_compat.extern_kernel_args(node))})")


def disabled_reason() -> str | None:
    if switched_off("DYNSTEP_FAST_PROBE"):
        return f"disabled by DYNSTEP_FAST_PROBE={os.environ['DYNSTEP_FAST_PROBE']}"
    return None


def install_when_inductor_loaded() -> None:
    """The probe's trace hook: install once Inductor's code generator is loaded (no Inductor import
    on dynstep's behalf)."""
    if not _installed and _compat.inductor_codegen_loaded():
        install()


def install() -> bool:
    """Route Inductor's wrapper lines for dynstep::probe through `probe`. False if torch lacks the
    hook or DYNSTEP_FAST_PROBE=0."""
    global _installed
    if not _installed and disabled_reason() is None:
        _installed = _compat.register_wrapper_codegen(KERNEL_NAME, codegen)
        _installed = _installed and _compat.register_wrapper_codegen(PUBLISH_KERNEL_NAME, publish_codegen)
    return _installed


def status() -> str:
    """One line: how Inductor's generated code calls dynstep::probe in this process, and why."""
    why = disabled_reason()
    if why is not None:
        return f"op call through the dispatcher ({why})"
    if importlib.util.find_spec(_compat.WRAPPER_CODEGEN_MODULE) is None:
        return f"op call through the dispatcher (torch {_torch_version()} has no {_compat.WRAPPER_CODEGEN_MODULE})"
    target = "the native kernel directly" if probe is not schema.probe else "the op (no native kernel loaded)"
    return f"direct call dynstep.fastpath.probe -> {target}"


def _torch_version() -> str:
    import torch

    return torch.__version__
