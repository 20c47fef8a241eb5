"""Build the native extension in a child process: `python native_build.py '<json job>'`.

dynstep/ops/native.py runs this file by path (it imports only the standard library and torch, so
it works whatever made `dynstep` importable in the parent) while holding the build lock, with a
time limit. It copies the sources into a fresh folder of its own, builds there with
`torch.utils.cpp_extension.load` (so no two builds ever share a folder or torch's own build lock,
and the paths ninja sees never depend on where dynstep is installed), checks that the library
imports, and renames it into place: a reader sees either no library or a whole one.

The job (JSON): {"name", "sources" (paths relative to "csrc"), "csrc", "include" (relative),
"cflags", "cuda_cflags", "work" (the fresh folder), "target" (the final library path),
"cuda_home" (or null)}. Exit 0 when the library is in place; otherwise the compiler's messages
are on stderr for the parent to quote.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def _tools_on_path() -> None:
    """torch runs `ninja` from PATH; a venv's python started without activating the venv (or the
    `ninja` wheel's own binary folder) is not on it."""
    try:
        import ninja
        extra = [str(ninja.BIN_DIR)]
    except (ImportError, AttributeError):
        extra = []
    extra.append(os.path.dirname(sys.executable))
    os.environ["PATH"] = os.pathsep.join([*extra, os.environ.get("PATH", "")])


def build(job: dict) -> Path:
    _tools_on_path()
    if job.get("cuda_home"):
        os.environ["CUDA_HOME"] = job["cuda_home"]   # read by cpp_extension when it is imported
    from torch.utils import cpp_extension

    work, csrc = Path(job["work"]), Path(job["csrc"])
    src = work / "src"
    for rel in job["copy"]:
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(csrc / rel, dest)
    out = work / "build"
    out.mkdir(parents=True, exist_ok=True)
    module = cpp_extension.load(name=job["name"], sources=[str(src / s) for s in job["sources"]],
                                extra_include_paths=[str(src)], extra_cflags=job["cflags"],
                                extra_cuda_cflags=job["cuda_cflags"], build_directory=str(out), verbose=False)
    target = Path(job["target"])
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(module.__file__, target)    # the work folder is beside the target: one file system
    return target


def main(argv: list[str]) -> int:
    job = json.loads(argv[1])
    try:
        build(job)
    finally:
        shutil.rmtree(job["work"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
