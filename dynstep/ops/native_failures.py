"""Why a native build failed, in one line, and what to do about it (`dynstep doctor` shows both).

    status = failed("cpu", compiler_output, library)   # NativeStatus(loaded=False, reason=..., fix=...)

The compiler's and torch's messages are long; a user needs the cause (no compiler, no ninja, no
Python headers, no CUDA headers, a compile error, a time limit) and the fix. The first matching
rule names them; anything else quotes the first error line.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class NativeStatus:
    loaded: bool
    reason: str          # why not loaded, or where it was loaded from
    path: str = ""       # the library, or the folder it was to be built in
    build_seconds: float = 0.0
    fix: str = ""        # what the user can do about it, when not loaded

# (pattern in the build's output, the cause, the fix); the first match wins
RULES: tuple[tuple[str, str, str], ...] = (
    (r"Ninja is required|ninja: (command )?not found|No such file or directory: 'ninja'",
     "ninja is not installed", "pip install ninja"),
    (r"(c\+\+|g\+\+|clang\+\+|x86_64-linux-gnu-g\+\+)[:']? (command )?not found|"
     r"No such file or directory: '(c\+\+|g\+\+)'|error trying to exec 'cc1plus'",
     "no C++ compiler", "install one (apt-get install g++, or xcode-select --install), or set DYNSTEP_NATIVE=0"),
    (r"Python\.h: No such file", "the Python development headers are missing",
     "install them (e.g. apt-get install python3-dev)"),
    (r"cuda_runtime(_api)?\.h: No such file|cuda\.h: No such file",
     "the CUDA toolkit's headers were not found", "set CUDA_HOME to the toolkit folder (the one with include/)"),
    (r"nvcc fatal|nvcc: (command )?not found",
     "nvcc failed", "check the CUDA toolkit (CUDA_HOME) and TORCH_CUDA_ARCH_LIST"),
    (r"No space left on device", "the disk is full", "free space under the cache, or set DYNSTEP_CACHE_DIR"),
    (r"Killed signal terminated program|internal compiler error: Killed",
     "the compiler was killed (out of memory?)", "rerun with MAX_JOBS=1, or set DYNSTEP_NATIVE=0"),
)


def failed(variant: str, output: str, library: Path) -> NativeStatus:
    cause, fix = classify(output)
    return NativeStatus(False, f"{variant.upper()} build failed: {cause}", str(library.parent), fix=fix)


def classify(output: str) -> tuple[str, str]:
    for pattern, cause, fix in RULES:
        if re.search(pattern, output):
            return cause, fix
    return first_error(output), "see the line above; `dynstep doctor` after a fix, or DYNSTEP_NATIVE=0"


def first_error(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"\berror\b|Error:", ln)]
    return (errors[0] if errors else lines[-1] if lines else "no output")[:300]


def timed_out(variant: str, seconds: float, library: Path) -> NativeStatus:
    return NativeStatus(False, f"{variant.upper()} build stopped after {seconds:.0f} s (time limit)",
                        str(library.parent), fix="rerun on an idle machine, or set DYNSTEP_NATIVE=0")


def unwritable(folder: Path, exc: OSError) -> NativeStatus:
    return NativeStatus(False, f"cache directory {folder} is not writable "
                               f"({type(exc).__name__}: {exc.strerror or exc})", str(folder),
                        fix="set DYNSTEP_CACHE_DIR to a writable directory, or DYNSTEP_NATIVE=0")
