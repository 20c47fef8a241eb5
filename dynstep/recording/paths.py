"""Where a rank's recording goes: ``run.dynstep/rank<N>/`` in a multi-rank job, the path itself in
one process. `dynstep.load("run.dynstep")` merges the ranks back (dynstep.recording.reader).

    rank_path(Path("run.dynstep"))   -> run.dynstep/rank1   (rank 1 of 2)
    rank_dirs(Path("run.dynstep"))   -> [run.dynstep/rank0, run.dynstep/rank1]   (directories, never symlinks)
"""

from __future__ import annotations

import re
from pathlib import Path

from ..core.errors import StorageError
from ..jobs.identity import current

RANK_DIR = re.compile(r"^rank([0-9]+)$")


def rank_path(path: Path) -> Path:
    ident = current()
    if not ident.multi:
        return path
    if (path / "manifest.json").exists():
        raise StorageError(f"cannot record rank {ident.rank} into {path}: it is a recording of a single process; "
                           "choose a new path for this distributed job (dynstep never mixes recordings)")
    if path.exists() and not path.is_dir():
        raise StorageError(f"cannot record to {path}: it exists and is not a directory; choose a new path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot make the recording directory {path}: {exc.strerror or exc}") from exc
    return path / f"rank{ident.rank}"


def rank_dirs(path: Path) -> list[Path]:
    """The per-rank recordings inside `path` (empty when it holds none), in rank order: directories
    only, never a symlink (a `rank1` pointing at another recording is not this job's)."""
    if not path.is_dir() or (path / "manifest.json").exists():
        return []
    found = [(int(m.group(1)), p) for p in path.iterdir()
             if (m := RANK_DIR.match(p.name)) and p.is_dir() and not p.is_symlink()]
    return [p for _, p in sorted(found)]


def rank_others(path: Path) -> list[Path]:
    """Entries named like a rank's recording that are not one (a symlink, a file): said, never read."""
    if not path.is_dir() or (path / "manifest.json").exists():
        return []
    return sorted(p for p in path.iterdir() if RANK_DIR.match(p.name) and (p.is_symlink() or not p.is_dir()))
