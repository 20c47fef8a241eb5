"""Build and load the native kernels (csrc/): best effort, logged, cached, never waited on without a bound.

    from dynstep.ops import native
    native.load()      # the extension module, or None (then the Python kernel serves every call)
    native.status()    # NativeStatus(loaded=..., reason=..., path=..., fix=...), shown by `dynstep doctor`

Loading registers the native CPU (and CUDA) kernels of `dynstep::probe` under the schema of
`dynstep.ops.schema`; connecting them to Python's actions is the probe package's job
(`dynstep.probe.registration`), so this module knows nothing above the op.

A built library is loaded directly (no lock, no compiler, no torch build machinery). The first
process to need one builds it: it takes the build lock (`buildlock`: an flock the kernel drops when
the holder dies, so a lock left by a killed build never blocks anyone), runs `native_build.py` in a
child process with a time limit, which builds in a fresh folder and renames the library into place,
and loads it. Another process meanwhile prints one line naming the builder and the lock file, waits
at most DYNSTEP_BUILD_WAIT seconds (default 300) for the library, and otherwise goes on with the
Python kernel, saying so. The cache is `$DYNSTEP_CACHE_DIR` or `~/.cache/dynstep`, one folder per
torch version, Python version and content of the sources (not their path: two checkouts or an
installed wheel with equal sources share one library).

The CUDA kernel is built only against a CUDA torch, with the CUDA toolkit's headers found, and a
device visible or TORCH_CUDA_ARCH_LIST set (nvcc needs a target architecture); when the CUDA build
fails, a CPU-only native build is tried before the Python kernel. `DYNSTEP_NATIVE=0` turns native
kernels off. Installing dynstep never needs a compiler: without one, the Python kernel stays in
place and `dynstep doctor` says why and what to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from ..core.extension import load_extension
from . import native_failures
from .buildlock import BuildLock, Holder
from .native_failures import NativeStatus

if TYPE_CHECKING:
    from .. import _native_ext

log = logging.getLogger("dynstep")

NAME = "dynstep_native"
SOURCES = ("probe_cpu.cpp", "probe_publish.cpp", "flight_lines.cpp")
CUDA_SOURCES = ("cuda/probe_cuda_op.cpp", "cuda/probe_cuda.cu")
HEADERS = ("probe_state.h", "probe_kernels.h", "cuda/probe_cuda.h")
BUILD_SCRIPT = Path(__file__).with_name("native_build.py")
BUILD_TIMEOUT = 900.0      # seconds one build may take before it is stopped
WAIT_ENV, WAIT_DEFAULT = "DYNSTEP_BUILD_WAIT", 300.0


def _find_csrc() -> Path:
    """The native sources: inside an installed package (dynstep/_csrc, see setup.py), else the checkout's csrc/."""
    here = Path(__file__).resolve().parents[1]
    for candidate in (here / "_csrc", here.parent / "csrc"):
        if (candidate / SOURCES[0]).is_file():
            return candidate
    return here.parent / "csrc"


CSRC = _find_csrc()


_lock = threading.Lock()
_module: ModuleType | None = None
_status = NativeStatus(False, "not loaded yet (dynstep.ops.native.load() runs on first probe use)")
_tried = False


def disabled_reason() -> str | None:
    from ..core.options import switched_off

    if switched_off("DYNSTEP_NATIVE"):
        return f"disabled by DYNSTEP_NATIVE={os.environ['DYNSTEP_NATIVE']}"
    return None


def cache_root() -> Path:
    return Path(os.environ.get("DYNSTEP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dynstep"))


def cache_dir() -> Path:
    """One folder per torch version, Python version and content of the sources: an upgraded dynstep
    never loads a library built from other sources; equal sources (two checkouts, a wheel) share it."""
    import torch

    tag = "torch" + torch.__version__.replace("+", "_") + f"-py{sys.version_info[0]}{sys.version_info[1]}"
    return cache_root() / "native" / f"{tag}-{_sources_digest()}"


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for name in sorted(SOURCES + CUDA_SOURCES + HEADERS):
        path = CSRC / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0")
    return digest.hexdigest()[:12]


def library_path(variant: str) -> Path:
    """Where the library of a variant ("cpu" or "cuda") lives once built."""
    return cache_dir() / variant / f"{NAME}.so"


def build_wait() -> float:
    from ..core.options import env_value

    value = env_value(WAIT_ENV)
    return WAIT_DEFAULT if value is None else float(value)


def needs_build() -> bool:
    """Whether load() would build (a first use): front ends show progress around it."""
    if _tried or disabled_reason() is not None or not (CSRC / SOURCES[0]).is_file():
        return False
    return not any(library_path(v).is_file() for v in _variants())


def load() -> "_native_ext | None":
    """The native extension, built on first use; None when disabled or the build failed."""
    global _module, _status, _tried
    with _lock:
        if _tried:
            return _module  # type: ignore[return-value]
        _tried = True
        why = disabled_reason()
        if why is not None:
            _status = NativeStatus(False, why, fix="unset DYNSTEP_NATIVE to use the native kernel")
            log.info("dynstep: native probe kernel %s", why)
            return None
        missing = [s for s in SOURCES + HEADERS if not (CSRC / s).is_file()]
        if missing:
            _status = NativeStatus(False, f"sources not found: {', '.join(str(CSRC / m) for m in missing)}",
                                   fix="reinstall dynstep (its wheel ships csrc/ as dynstep/_csrc)")
            return None
        _module, _status = _load_or_build()
        return _module  # type: ignore[return-value]


def _variants() -> list[str]:
    return ["cuda", "cpu"] if with_cuda() else ["cpu"]


def _load_or_build() -> tuple[ModuleType | None, NativeStatus]:
    try:
        _check_writable(cache_dir())
    except OSError as exc:
        status = native_failures.unwritable(cache_dir(), exc)
        warnings.warn(f"dynstep: native probe kernel not built, using the Python kernel: {status.reason}; "
                      f"{status.fix}", RuntimeWarning, stacklevel=5)
        return None, status
    failures: list[NativeStatus] = []
    for variant in _variants():
        module, status = _load_variant(variant)
        if module is not None:
            if failures:
                status = dataclasses.replace(status, reason=f"{status.reason}; the CUDA kernel was not built: "
                                                            f"{failures[0].reason}")
            return module, status
        failures.append(status)
        if status.reason.startswith("gave up waiting"):
            break
    log.warning("dynstep: native probe kernel not available, using the Python kernel: %s", failures[-1].reason)
    return None, failures[-1]


def _load_variant(variant: str) -> tuple[ModuleType | None, NativeStatus]:
    library = library_path(variant)
    if library.is_file():
        return _import_status(library, 0.0)
    lock = BuildLock(cache_dir() / f"{variant}.lock", wait=build_wait(), on_wait=_say_waiting)
    with lock:
        if library.is_file():                  # built by the process we waited for
            return _import_status(library, 0.0)
        if not lock.acquired:
            return None, _gave_up(lock, library)
        start = time.perf_counter()
        failure = _build(variant, library, lock)
        seconds = time.perf_counter() - start
    if failure is not None:
        return None, failure
    log.warning("dynstep: native probe kernel built in %.1f s", seconds)
    return _import_status(library, seconds)


def _say_waiting(holder: Holder | None, path: Path) -> None:
    who = holder.describe() if holder else "another process"
    log.warning("dynstep: waiting for %s to finish building the native probe kernel (lock %s); giving up "
                "after %g s (%s)", who, path, build_wait(), WAIT_ENV)


def _gave_up(lock: BuildLock, library: Path) -> NativeStatus:
    who = lock.holder.describe() if lock.holder else "another process"
    reason = (f"gave up waiting {lock.waited:.0f} s for {who} to build {library.name} "
              f"(lock {lock.path})")
    warnings.warn(f"dynstep: {reason}; using the Python kernel in this process", RuntimeWarning, stacklevel=6)
    return NativeStatus(False, reason, str(library.parent),
                        fix=f"let that build finish (or stop it) and rerun, or raise {WAIT_ENV}")


def _build(variant: str, library: Path, lock: BuildLock) -> NativeStatus | None:
    """Build `variant` into `library` in a child process; None on success, else why not."""
    for stale in cache_dir().glob(f".build-{variant}-*"):   # left by a killed build: only the holder builds
        shutil.rmtree(stale, ignore_errors=True)
    work = cache_dir() / f".build-{variant}-{os.getpid()}"
    cuda = variant == "cuda"
    job = {"name": NAME, "csrc": str(CSRC), "work": str(work), "target": str(library),
           "copy": list(SOURCES + HEADERS + (CUDA_SOURCES if cuda else ())),
           "sources": list(SOURCES + (CUDA_SOURCES if cuda else ())),
           "cflags": ["-O3"] + (["-DDYNSTEP_WITH_CUDA"] if cuda else []),
           "cuda_cflags": ["-O3", "-DDYNSTEP_WITH_CUDA"], "cuda_home": cuda_home() if cuda else None}
    log.warning("dynstep: building the native probe kernel (%s) into %s: once per torch version and kernel "
                "source, about a minute (DYNSTEP_NATIVE=0 skips it)", variant.upper(), library.parent)
    try:
        proc = subprocess.run([sys.executable, str(BUILD_SCRIPT), json.dumps(job)], capture_output=True,
                              text=True, timeout=BUILD_TIMEOUT, pass_fds=(lock.fd,) if lock.fd else ())
    except subprocess.TimeoutExpired:
        shutil.rmtree(work, ignore_errors=True)
        return native_failures.timed_out(variant, BUILD_TIMEOUT, library)
    except OSError as exc:
        return native_failures.failed(variant, f"{type(exc).__name__}: {exc}", library)
    if proc.returncode != 0 or not library.is_file():
        return native_failures.failed(variant, proc.stderr or proc.stdout, library)
    return None


def _import_status(library: Path, seconds: float) -> tuple[ModuleType | None, NativeStatus]:
    try:
        module = _import(library)
    except ImportError as exc:
        return None, NativeStatus(False, f"cannot load {library}: {exc}", str(library),
                                  fix=f"delete {library.parent} and rerun (it will be rebuilt)")
    return module, NativeStatus(True, f"loaded {library}", str(library), seconds)


def _import(library: Path) -> ModuleType:
    import torch  # noqa: F401  (the library links against libtorch's symbols, loaded by importing torch)

    return load_extension(NAME, library)


def _check_writable(build: Path) -> None:
    build.mkdir(parents=True, exist_ok=True)
    probe = build / f".write-test-{os.getpid()}"
    probe.write_bytes(b"")
    probe.unlink()


def cuda_home() -> str | None:
    """The CUDA toolkit whose headers a build uses, found as torch finds it (CUDA_HOME, CUDA_PATH,
    /usr/local/cuda, then nvcc's own folder with links and wrapper scripts followed), or None.
    A folder counts only when it has include/cuda_runtime.h."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = Path(nvcc).resolve()
        candidates.append(str(real.parent.parent))
        candidates.extend(_wrapped_nvcc_homes(real))
    for home in candidates:
        if home and (Path(home) / "include" / "cuda_runtime.h").is_file():
            return str(Path(home))
    return None


def _wrapped_nvcc_homes(nvcc: Path) -> list[str]:
    """A shell wrapper (`exec /usr/local/cuda-13.0/bin/nvcc "$@"`) names the real nvcc: its toolkit."""
    try:
        text = nvcc.read_text(errors="replace")[:4096] if nvcc.stat().st_size < 4096 else ""
    except OSError:
        return []
    return [str(Path(word).parent.parent) for word in text.split() if word.endswith("/bin/nvcc")]


def with_cuda() -> bool:
    """Build the CUDA kernel too: a CUDA torch, the toolkit's headers, and a target architecture."""
    return _cuda_missing() is None


def _cuda_missing() -> str | None:
    import torch

    if torch.version.cuda is None:
        return "torch is a CPU build (torch.version.cuda is None)"
    if cuda_home() is None:
        return ("no CUDA toolkit with headers found (include/cuda_runtime.h under CUDA_HOME, CUDA_PATH, "
                "/usr/local/cuda or nvcc's folder)")
    if not os.environ.get("TORCH_CUDA_ARCH_LIST") and torch.cuda.device_count() == 0:
        return ("no CUDA device is visible and TORCH_CUDA_ARCH_LIST is not set (nvcc needs a target "
                "architecture): the CPU kernel was built natively")
    return None


def cuda_reason() -> str:
    missing = _cuda_missing()
    if missing is not None:
        return missing
    return "built" if _module is not None and getattr(_module, "WITH_CUDA", False) else _status.reason


def status() -> NativeStatus:
    return _status


def get() -> "_native_ext | None":
    """The loaded module without triggering a build."""
    return _module  # type: ignore[return-value]
