"""`dynstep doctor`: what is installed and registered, as lines of text and an ok flag.

    lines, ok = report()
"""

from __future__ import annotations

import platform
import shutil
import sys


def report() -> tuple[list[str], bool]:
    import torch

    from . import __version__, _compat, ops

    ok = True
    lines = [f"dynstep {__version__}  python {platform.python_version()}  torch {torch.__version__}",
             f"cuda available: {torch.cuda.is_available()}  (torch built with CUDA {torch.version.cuda})"]
    from importlib.metadata import entry_points

    names = [e.name for e in entry_points(group="torch_dynamo_backends")]
    registered = "superstep" in names
    ok &= registered
    lines.append(f"backend 'superstep' registered through torch_dynamo_backends: {registered}")
    from . import native as native_mod

    st = native_mod.status()
    lines.append(f"native extension: {'loaded' if st.loaded else 'not loaded'} ({st.reason})")
    lines.append("kernels (dispatch keys with a kernel):")
    for name, keys in ops.registered_kernels().items():
        native = [k for k in keys if k in ("CPU", "CUDA")]
        if name != "probe":
            why = "Python kernel (no native kernel is planned for this op)"
        else:
            missing = []
            if "CPU" not in keys:
                missing.append(f"CPU: {st.reason}")
            if "CUDA" not in keys:
                missing.append(f"CUDA: {native_mod.cuda_reason()}")
            why = ("native: " + ",".join(native) if native else "Python kernel only") + \
                ("; missing " + "; ".join(missing) if missing else "")
        lines.append(f"  dynstep::{name:<12} {', '.join(keys):<40} {why}")
    from . import fastpath, probes

    lines.append(f"Inductor's wrapper calls dynstep::probe by: {fastpath.status()}")
    missing = _compat.bytecode_hooks_missing()
    lines.append("bytecode stepper (step_bytecode, dynstep run --step-bytecode): " +
                 ("available" if missing is None else f"unavailable: {missing}"))
    lines.append(f"probes: {'enabled' if probes.enabled() else 'disabled'} "
                 "(dynstep.probes.enable()/disable(), DYNSTEP_PROBES=0)")
    mod = native_mod.get()
    if mod is not None:
        held, cap = mod.memory()
        lines.append(f"record memory: {held} bytes held in native rings, cap {cap} bytes "
                     "(dynstep.set_record_memory_cap; oldest records dropped first)")
    lines.append(f"compilers: g++ {'found' if shutil.which('g++') else 'missing'}, "
                 f"nvcc {'found' if shutil.which('nvcc') else 'missing'}")
    lines.append(f"executable: {sys.executable}")
    return lines, ok
