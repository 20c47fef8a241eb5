"""How a stop shows values: short tensor reprs, a `TensorView` (stats and first values), and the
Python stack that led into the compiled call. Shared by the runtime and bytecode steppers.

    value_text(t)        'tensor([[ 0.1, ...]])' with short print options, the user's restored
    tensor_view(t)       TensorView(shape, dtype, device, stats, sample)
"""

from __future__ import annotations

import os
import traceback
from typing import Any

import torch

from .. import _compat
from ..core.events import TensorView
from ..core.records import dtype_name
from ..probe.stats import stats_of, unsupported_reason

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(torch.__file__)


def value_text(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        with _print_options():
            return repr(value.detach())
    return repr(value)


def safe_text(value: Any) -> str:
    """`value_text`, or why the value could not be shown (a repr that raises must not end a session)."""
    try:
        return value_text(value)
    except Exception as exc:
        return f"<{type(value).__name__}: repr failed: {exc}>"


class _print_options:
    """Short tensor reprs at a stop, the user's print options restored afterwards."""

    def __enter__(self) -> None:
        self._saved = _compat.print_options()
        torch.set_printoptions(threshold=64, edgeitems=3, precision=4)

    def __exit__(self, *exc: object) -> None:
        _compat.restore_print_options(self._saved)


def tensor_view(x: Any) -> TensorView | None:
    if not isinstance(x, torch.Tensor) or unsupported_reason(x) is not None:
        return None
    flat = x.detach().flatten()[:6].to("cpu")
    sample = tuple(float(v) for v in flat.tolist()) if not x.dtype.is_complex else ()
    return TensorView(shape=tuple(x.shape), dtype=dtype_name(x.dtype), device=str(x.device),
                      stats=stats_of(x) if x.numel() else None, sample=sample)


def user_stack() -> tuple[str, ...]:
    """The Python frames that led into the compiled call, without torch's and dynstep's own."""
    skip = ("<", _TORCH_DIR, _PKG_DIR, _compat.inductor_cache_dir())
    out = []
    for fs in traceback.extract_stack()[:-2]:
        f = fs.filename
        if f.startswith(skip) or os.path.basename(f) == "runpy.py":
            continue
        out.append(f"{f}:{fs.lineno} in {fs.name}: {(fs.line or '').strip()}")
    return tuple(out)
