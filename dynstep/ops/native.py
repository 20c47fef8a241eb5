"""Build and load the native kernels (csrc/): best effort, logged, cached.

    from dynstep.ops import native
    native.load()      # the extension module, or None (then the Python kernel serves every call)
    native.status()    # NativeStatus(loaded=..., reason=..., path=...), shown by `dynstep doctor`

Loading registers the native CPU (and CUDA) kernels of `dynstep::probe` under the schema of
`dynstep.ops.schema`; connecting them to Python's actions is the probe package's job
(`dynstep.probe.kernel`), so this module knows nothing above the op.

The first call builds the extension with `torch.utils.cpp_extension.load` into a cache directory
(`$DYNSTEP_CACHE_DIR` or `~/.cache/dynstep`, one folder per torch version and content of the
sources) and logs that it is doing so; later processes load the cached library.
`DYNSTEP_NATIVE=0` turns native kernels off.
Installing dynstep never needs a compiler: without one, the Python kernel stays in place and
`dynstep doctor` says why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .. import _native_ext

log = logging.getLogger("dynstep")

CSRC = Path(__file__).resolve().parents[2] / "csrc"
SOURCES = ("probe_cpu.cpp", "probe_publish.cpp")
CUDA_SOURCES = ("cuda/probe_cuda_op.cpp", "cuda/probe_cuda.cu")
HEADERS = ("probe_state.h", "probe_kernels.h", "cuda/probe_cuda.h")


@dataclasses.dataclass(frozen=True)
class NativeStatus:
    loaded: bool
    reason: str          # why not loaded, or where it was loaded from
    path: str = ""       # the build directory
    build_seconds: float = 0.0


_lock = threading.Lock()
_module: ModuleType | None = None
_status = NativeStatus(False, "not loaded yet (dynstep.ops.native.load() runs on first probe use)")
_tried = False


def disabled_reason() -> str | None:
    from ..core.options import switched_off

    if switched_off("DYNSTEP_NATIVE"):
        return f"disabled by DYNSTEP_NATIVE={os.environ['DYNSTEP_NATIVE']}"
    return None


def cache_dir() -> Path:
    """One build folder per torch version and per content of the sources: an upgraded dynstep (or a
    second checkout) never loads a library built from other sources, and two never share a folder."""
    import torch

    root = os.environ.get("DYNSTEP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dynstep")
    tag = "torch" + torch.__version__.replace("+", "_")
    return Path(root) / "native" / f"{tag}-{_sources_digest()}"


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for name in sorted(SOURCES + CUDA_SOURCES + HEADERS):
        path = CSRC / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0")
    return digest.hexdigest()[:12]


def load() -> "_native_ext | None":
    """The native extension, built on first use; None when disabled or the build failed."""
    global _module, _status, _tried
    with _lock:
        if _tried:
            return _module  # type: ignore[return-value]
        _tried = True
        why = disabled_reason()
        if why is not None:
            _status = NativeStatus(False, why)
            log.info("dynstep: native probe kernel %s", why)
            return None
        missing = [s for s in SOURCES + HEADERS if not (CSRC / s).is_file()]
        if missing:
            _status = NativeStatus(False, f"sources not found: {', '.join(str(CSRC / m) for m in missing)} "
                                          "(native kernels need a source checkout)")
            return None
        _module, _status = _build()
        return _module  # type: ignore[return-value]


def _build() -> tuple[ModuleType | None, NativeStatus]:
    from torch.utils import cpp_extension

    build = cache_dir()
    try:
        build.mkdir(parents=True, exist_ok=True)
        _check_writable(build)
    except OSError as exc:
        reason = (f"cache directory {build} is not writable ({type(exc).__name__}: {exc.strerror or exc}); "
                  "set DYNSTEP_CACHE_DIR to a writable directory, or DYNSTEP_NATIVE=0")
        warnings.warn(f"dynstep: native probe kernel not built, using the Python kernel: {reason}",
                      RuntimeWarning, stacklevel=4)
        return None, NativeStatus(False, reason, str(build))
    fresh = not any(build.glob("dynstep_native*.so"))
    if fresh:
        log.warning("dynstep: building the native probe kernel into %s (once per torch version and "
                    "kernel source; about a minute; DYNSTEP_NATIVE=0 skips it)", build)
    start = time.perf_counter()
    sources, flags = list(SOURCES), ["-O3"]
    if with_cuda():  # a CUDA kernel only against a CUDA-enabled torch
        sources += CUDA_SOURCES
        flags.append("-DDYNSTEP_WITH_CUDA")
    try:
        module = cpp_extension.load(name="dynstep_native", sources=[str(CSRC / s) for s in sources],
                                    extra_include_paths=[str(CSRC)], extra_cflags=flags,
                                    extra_cuda_cflags=["-O3", "-DDYNSTEP_WITH_CUDA"],
                                    build_directory=str(build), verbose=False)
    except Exception as exc:  # no compiler, no ninja, bad headers: fall back, visibly
        reason = f"build failed ({type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else ''})"
        log.warning("dynstep: native probe kernel not available, using the Python kernel: %s", reason)
        return None, NativeStatus(False, reason, str(build))
    seconds = time.perf_counter() - start
    if fresh:
        log.warning("dynstep: native probe kernel built in %.1f s", seconds)
    return module, NativeStatus(True, f"loaded {module.__file__}", str(build), seconds)


def _check_writable(build: Path) -> None:
    probe = build / f".write-test-{os.getpid()}"
    probe.write_bytes(b"")
    probe.unlink()


def with_cuda() -> bool:
    """Build the CUDA kernel too: torch has CUDA and a CUDA toolkit is found."""
    import torch
    from torch.utils import cpp_extension

    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def cuda_reason() -> str:
    import torch
    from torch.utils import cpp_extension

    if torch.version.cuda is None:
        return "torch is a CPU build (torch.version.cuda is None)"
    if cpp_extension.CUDA_HOME is None:
        return "no CUDA toolkit found (CUDA_HOME)"
    return "built" if _module is not None and getattr(_module, "WITH_CUDA", False) else _status.reason


def status() -> NativeStatus:
    return _status


def get() -> "_native_ext | None":
    """The loaded module without triggering a build."""
    return _module  # type: ignore[return-value]
