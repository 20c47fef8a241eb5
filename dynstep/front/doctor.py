"""`dynstep doctor`: what is installed and registered, as lines of text and an ok flag.

    lines, ok = report()
"""

from __future__ import annotations

import platform
import shutil
import sys


def report() -> tuple[list[str], bool]:
    import torch

    from .. import __version__

    lines = [f"dynstep {__version__}  python {platform.python_version()}  torch {torch.__version__}",
             f"cuda available: {torch.cuda.is_available()}  (torch built with CUDA {torch.version.cuda})"]
    ok = _backend(lines)
    _kernels(lines)
    _features(lines)
    _mixed_mode(lines)
    lines.append(f"compilers: g++ {'found' if shutil.which('g++') else 'missing'}, "
                 f"nvcc {'found' if shutil.which('nvcc') else 'missing'}")
    lines.append(f"executable: {sys.executable}")
    return lines, ok


def _backend(lines: list[str]) -> bool:
    from importlib.metadata import entry_points

    names = [e.name for e in entry_points(group="torch_dynamo_backends")]
    registered = "superstep" in names
    lines.append(f"backend 'superstep' registered through torch_dynamo_backends: {registered}")
    return registered


def _kernels(lines: list[str]) -> None:
    from ..ops import native, schema
    from ..probe import registration
    from ..step import breakpoints

    registration.ensure()  # what a compile with probes would register
    breakpoints.ensure()   # ... and one with stop points or breakpoints
    st = native.status()
    lines.append(f"native extension: {'loaded' if st.loaded else 'not loaded'} ({st.reason})")
    if not st.loaded and st.fix:
        lines.append(f"  to fix: {st.fix}")
    lines.append("kernels (dispatch keys with a kernel):")
    for name, keys in schema.registered_kernels().items():
        lines.append(f"  dynstep::{name:<12} {', '.join(keys):<40} {_kernel_note(name, keys, st.reason)}")


def _kernel_note(name: str, keys: list[str], native_reason: str) -> str:
    from ..ops import native

    if name not in ("probe", "publish"):
        return "Python kernel (no native kernel is planned for this op)"
    have = [k for k in keys if k in ("CPU", "CUDA")]
    missing = []
    if "CPU" not in keys:
        missing.append(f"CPU: {native_reason}")
    if "CUDA" not in keys:
        missing.append(f"CUDA: {native.cuda_reason()}")
    return ("native: " + ",".join(have) if have else "Python kernel only") + \
        ("; missing " + "; ".join(missing) if missing else "")


def _features(lines: list[str]) -> None:
    from ..ops import native
    from ..probe import fastpath, switch

    lines.append(f"Inductor's wrapper calls dynstep::probe by: {fastpath.status()}")
    lines.append(_fused_line())
    _bytecode(lines)
    lines.append(f"probes: {'enabled' if switch.enabled() else 'disabled'} "
                 "(dynstep.probes.enable()/disable(), DYNSTEP_PROBES=0)")
    mod = native.get()
    if mod is not None:
        held, cap = mod.memory()
        lines.append(f"record memory: {held} bytes held in native rings, cap {cap} bytes "
                     "(dynstep.set_record_memory_cap; oldest records dropped first)")


def _fused_line() -> str:
    from ..backends import stats_pass

    state = "on" if stats_pass.enabled() else "off (DYNSTEP_FUSED_STATS=0: every probe is an extern call)"
    return (f"summary probes under Inductor computed inside its kernels: {state}; values of "
            f"{stats_pass.FUSE_MIN_NUMEL} elements or more (`dynstep doctor --fusion` counts kernels with and without "
            "probes; DYNSTEP_KERNEL_COUNTS=1 records them for every probed graph)")


def _bytecode(lines: list[str]) -> None:
    """Which mechanism the bytecode stepper uses on this torch and Python, and the native stack reader."""
    from ..bytecode import framestack, mechanism

    missing = mechanism.unavailable()
    chosen = mechanism.choose() if missing is None else None
    lines.append("bytecode stepper (step_bytecode, dynstep run --step-bytecode): " +
                 (f"available: {chosen.describe()}" if chosen is not None else f"unavailable: {missing}"))
    framestack.load()      # what the `stack` command would build on a torch without its own reader
    st = framestack.status()
    use = ("used by the stepper here" if chosen is not None and chosen.stack == "native" else
           f"not used here: torch reads the stack itself ({mechanism.ENV}=hook uses it)" if chosen is not None
           else "the stepper cannot run here")
    lines.append(f"  native value-stack reader (csrc/frame_stack.c): {'loaded' if st.loaded else 'not loaded'}, "
                 f"{use} ({st.reason})")


def _mixed_mode(lines: list[str]) -> None:
    """Which debugger and Python helper `dynstep gdb` would use, and how to get what is missing."""
    from .gdb_launch import find_gdb, find_helper, gdb_version, helper_hint

    for label, cuda in (("dynstep gdb", False), ("dynstep gdb --cuda", True)):
        path = find_gdb(cuda)
        missing = "cuda-gdb: put the CUDA toolkit's bin/ on PATH" if cuda else "apt-get install gdb"
        lines.append(f"{label}: " + (f"{path} ({gdb_version(path)})" if path else f"no debugger found ({missing})"))
    helper = find_helper()
    lines.append("python helper for py-bt in gdb: " + (helper or "not found; gdb shows native frames only. "
                                                        + helper_hint()))
