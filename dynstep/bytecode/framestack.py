"""dynstep's own value-stack reader (csrc/frame_stack.c), for a torch without one: built, cached, loaded.

    from dynstep.bytecode import framestack
    framestack.read(frame, depth)     # the value stack, bottom first; NULL slots as "<NULL>"
    framestack.status()               # FrameStackStatus(loaded=..., reason=..., path=...): `dynstep doctor`

torch 2.12 and 2.13 read a frame's value stack with `_get_frame_value_stack_with_depth`; torch
2.11 has no such helper, so the bytecode stepper uses this one there (and wherever
DYNSTEP_BYTECODE_MECHANISM=hook asks for it). It is a plain CPython extension, not a torch one:
the C file includes the interpreter's internal frame header (Include/internal/pycore_frame.h),
whose layout differs per minor version, so it is compiled by the running interpreter's own
compiler settings and headers (`sysconfig`), needs neither torch nor pybind11 nor C++ (the
internal headers are C), builds in about a second, and can be built for an interpreter that has
no torch at all (the tests build it for every Python they find).

One build per interpreter version and source content, under `$DYNSTEP_CACHE_DIR` or
`~/.cache/dynstep` (`frame_stack/cpython-3.12.3-<digest>/`), written under a temporary name and
renamed, so two processes building at once both end with a whole library. Best effort: no
compiler, no headers or an unverified Python version leave it unloaded with the reason in
`status()`, and the `stack` command says so. `DYNSTEP_NATIVE_STACK=0` turns it off (it is not
a kernel: `DYNSTEP_NATIVE=0`, which keeps the Python probe kernel, leaves it on).

Only the standard library is imported here, so a test can load this file alone under another
interpreter (tests/bytecode/interp_check.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import platform
import shlex
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

log = logging.getLogger("dynstep")

SOURCE = Path(__file__).resolve().parents[2] / "csrc" / "frame_stack.c"
MODULE = "dynstep_frame_stack"
# minor versions whose _PyInterpreterFrame layout csrc/frame_stack.c was checked against (and tested)
VERIFIED = ((3, 11), (3, 12), (3, 13))
NULL_TEXT = "<NULL>"
SWITCH = "DYNSTEP_NATIVE_STACK"


@dataclasses.dataclass(frozen=True)
class FrameStackStatus:
    loaded: bool
    reason: str             # why not loaded, or what was loaded (the frame layout it reads)
    path: str = ""          # the library, or the folder it was to be built in
    build_seconds: float = 0.0


class FrameStackUnavailable(RuntimeError):
    """The native reader could not be built or loaded; the message says why."""


_lock = threading.Lock()
_module: ModuleType | None = None
_status = FrameStackStatus(False, "not loaded yet (built on first use of the value stack)")
_tried = False


def unsupported_python(version: tuple[int, int] | None = None) -> str | None:
    """Why this interpreter's (or that version's) frame layout is refused, or None when it is one of VERIFIED."""
    here = version or (sys.version_info[0], sys.version_info[1])
    if sys.implementation.name != "cpython":
        return (f"dynstep's value-stack reader reads CPython's interpreter frame; this is "
                f"{platform.python_implementation()} {platform.python_version()}")
    if here not in VERIFIED:
        known = ", ".join(f"{a}.{b}" for a, b in VERIFIED)
        return (f"dynstep's value-stack reader knows the interpreter frame layout of CPython {known}; "
                f"Python {here[0]}.{here[1]} is not verified: "
                f"csrc/frame_stack.c must be checked against its Include/internal/pycore_frame.h first")
    return None


def cache_dir() -> Path:
    root = os.environ.get("DYNSTEP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dynstep")
    return Path(root) / "frame_stack" / f"{sys.implementation.name}-{platform.python_version()}-{_digest()}"


def _digest() -> str:
    """The source and the headers it is compiled against: another interpreter build, another folder."""
    digest = hashlib.sha256(SOURCE.read_bytes() if SOURCE.is_file() else b"")
    digest.update(f"{sys.version}\0{_include_dirs()}".encode())
    return digest.hexdigest()[:12]


def _include_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(p for p in (paths.get("include"), paths.get("platinclude")) if p))


def _disabled() -> str | None:
    # its own switch: DYNSTEP_NATIVE=0 keeps the Python probe kernel, and should not cost the `stack` view
    value = os.environ.get(SWITCH, "1").strip().lower()
    return f"disabled by {SWITCH}={os.environ[SWITCH]}" if value in ("0", "false", "no", "off") else None


def load() -> ModuleType | None:
    """The native reader, built on first use; None (and `status().reason`) when it cannot be had."""
    global _module, _status, _tried
    with _lock:
        if _tried:
            return _module
        _tried = True
        why = _disabled() or unsupported_python() or _missing_source()
        if why is not None:
            _status = FrameStackStatus(False, why)
            return None
        _module, _status = _build_and_load(cache_dir())
        return _module


def _missing_source() -> str | None:
    if SOURCE.is_file():
        return None
    return f"source not found: {SOURCE} (the native reader needs a source checkout)"


def _build_and_load(folder: Path) -> tuple[ModuleType | None, FrameStackStatus]:
    library = folder / f"{MODULE}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    seconds = 0.0
    if not library.is_file():
        start = time.perf_counter()
        failure = build(library)
        seconds = time.perf_counter() - start
        if failure is not None:
            log.warning("dynstep: native value-stack reader not available: %s", failure)
            return None, FrameStackStatus(False, failure, str(folder))
    try:
        module = _import(library)
    except ImportError as exc:
        return None, FrameStackStatus(False, f"cannot load {library}: {exc}", str(library))
    return module, FrameStackStatus(True, f"{library}; reads the {module.LAYOUT}", str(library), seconds)


def build(library: Path) -> str | None:
    """Compile csrc/frame_stack.c into `library` with this interpreter's settings; the failure, or None."""
    includes = _include_dirs()
    if not any((Path(d) / "internal" / "pycore_frame.h").is_file() for d in includes):
        return (f"CPython's internal headers are missing (no internal/pycore_frame.h under "
                f"{' or '.join(includes) or 'the include path'}): install the Python development headers "
                f"(e.g. python{sys.version_info[0]}.{sys.version_info[1]}-dev)")
    partial = library.with_name(f".{library.name}.{os.getpid()}.tmp")
    command = _compile_command(partial, includes)
    try:
        library.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return (f"cache directory {library.parent} is not writable ({type(exc).__name__}: {exc.strerror or exc}); "
                "set DYNSTEP_CACHE_DIR to a writable directory")
    try:
        log.info("dynstep: building the native value-stack reader: %s", shlex.join(command))
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"build failed ({type(exc).__name__}: {exc})"
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "error" in ln] or \
            (proc.stderr or proc.stdout).splitlines()[-1:]
        return f"build failed ({shlex.join(command[:1])} exited {proc.returncode}: {' | '.join(lines[:3])[:400]})"
    os.replace(partial, library)
    return None


def _compile_command(output: Path, includes: list[str]) -> list[str]:
    # LDSHARED compiles and links in one go on Linux ("gcc -shared ...") and macOS ("clang -bundle ...")
    linker = shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared")
    pic = shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC")
    return [*linker, *pic, "-O2", *(f"-I{d}" for d in includes), str(SOURCE), "-o", str(output)]


def _import(library: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(library))
    spec = importlib.util.spec_from_file_location(MODULE, str(library), loader=loader)
    if spec is None:
        raise ImportError(f"no module spec for {library}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def read(frame: FrameType, depth: int) -> list[Any]:
    """The frame's value stack, bottom first, at most `depth` slots (the static depth before the
    instruction it is stopped at); NULL slots read "<NULL>". Raises FrameStackUnavailable with the
    reason when the reader cannot be had."""
    module = load()
    if module is None:
        raise FrameStackUnavailable(f"dynstep's native value-stack reader is not available: {_status.reason}")
    null = module.NULL
    return [NULL_TEXT if value is null else value for value in module.value_stack(frame, depth)]


def status() -> FrameStackStatus:
    return _status
