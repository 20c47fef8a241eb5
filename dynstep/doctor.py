"""`dynstep doctor`: what is installed and registered, as lines of text and an ok flag.

    lines, ok = report()
"""

from __future__ import annotations

import platform
import shutil
import sys


def report() -> tuple[list[str], bool]:
    import torch

    from . import __version__, ops

    ok = True
    lines = [f"dynstep {__version__}  python {platform.python_version()}  torch {torch.__version__}",
             f"cuda available: {torch.cuda.is_available()}  (torch built with CUDA {torch.version.cuda})"]
    from importlib.metadata import entry_points

    names = [e.name for e in entry_points(group="torch_dynamo_backends")]
    registered = "superstep" in names
    ok &= registered
    lines.append(f"backend 'superstep' registered through torch_dynamo_backends: {registered}")
    lines.append("kernels (dispatch keys with a kernel):")
    for name, keys in ops.registered_kernels().items():
        native = [k for k in keys if k in ("CPU", "CUDA")]
        why = "native: " + ",".join(native) if native else "Python kernel only (native kernels not built)"
        lines.append(f"  dynstep::{name:<12} {', '.join(keys):<40} {why}")
    lines.append(f"compilers: g++ {'found' if shutil.which('g++') else 'missing'}, "
                 f"nvcc {'found' if shutil.which('nvcc') else 'missing'}")
    lines.append(f"executable: {sys.executable}")
    return lines, ok
