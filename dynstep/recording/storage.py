"""Writing recordings: a directory of safetensors chunks plus JSON lines. Never pickle.

    run.dynstep/
      manifest.json                 {"format": "dynstep-recording", "version": 2}
      records.jsonl                 one JSON object per snapshot, in hit order
      chunk-<pid>-<n>.safetensors   the tensor of the snapshot whose line names it
      run.json                      the run: versions, platform, argv, start and end (RunInfo)
      compile.jsonl                 compile events (graph breaks, recompiles, compiles) and the graphs
                                    superstep instrumented, one JSON object per line, as they happened
      .lock                         held (flock) by the process streaming into the recording

What dynstep promises (docs/reliability.md):
- **Nothing lost**: a streaming writer (`session(path=...)`) writes every hit through to the OS
  before the probe returns to the model — the tensor's chunk first (a temporary name, then a
  rename), then its JSON line — so a run killed by SIGKILL or SIGTERM leaves every hit that had
  returned loadable. No fsync: what survives a power loss is up to the file system.
- **Nothing deleted that dynstep did not write**: a path that exists must be an empty directory or
  a dynstep recording holding only files dynstep writes; anything else is a `StorageError`. A
  recording is replaced by writing the new one beside it and renaming, never by emptying it.
- **One writer**: a recording being streamed into is locked; a second writer, or a save over it,
  gets a `StorageError` naming the path and the holder's pid. The lock dies with its process.

    save(snapshots, "run.dynstep");  Writer(path).append(snap)

Version 2 gained run.json and compile.jsonl without a new version number: a reader of version 2
that predates them ignores files it does not know (an older dynstep refuses to *replace* such a
recording, since it does not know those files as its own: the safe side).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import threading
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import StorageError
from ..core.jsonsafe import json_safe
from ..core.records import Snapshot
from ..recording.compile_log import CompileLog, Entry
from .facts import GraphPlan, KernelCount, RunInfo, to_json
from .files import read_regular

try:
    import fcntl
except ImportError:  # not on Windows: recordings are not locked there
    fcntl = None  # type: ignore[assignment]

FORMAT = "dynstep-recording"
VERSION = 2
READS = (1, 2)                      # versions this dynstep can load
OWN_FILES = re.compile(r"^(manifest\.json|records\.jsonl|\.lock|chunk-[0-9]+(-[0-9]+)?\.safetensors(\.tmp)?"
                       r"|run\.json(\.tmp)?|compile\.jsonl"
                       r"|flight\.json|replay\.json|replay\.safetensors)$")   # a flight recorder's dump (dynstep.flight)
_writers: "weakref.WeakSet[Writer]" = weakref.WeakSet()


class Writer:
    """Streams snapshots into a recording directory, each written through before `append` returns.

    With `compile_log`, every entry from now on goes to compile.jsonl as it comes, and the plan of a
    graph compiled earlier goes there before the first hit that names it; `run` goes to run.json
    (rewritten with the end of the run by `close(run=...)`)."""

    def __init__(self, path: str | Path, *, run: RunInfo | None = None, compile_log: CompileLog | None = None) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._chunks = 0
        self._closed = False
        self._lock_fd = -1
        self._lines_fd = -1
        self._compile_fd = -1
        self._unlisten = None
        self._run = run
        self._log = compile_log
        self._planned: set[str] = set()        # graphs whose plan is in compile.jsonl
        _install(self.path, lambda folder: self._start(folder, compile_log))
        _writers.add(self)

    def _start(self, folder: Path, compile_log: CompileLog | None) -> None:
        """Open the new recording in `folder` (before it is renamed into place)."""
        _write_manifest(folder)
        self._lock_fd = _take_lock(folder)
        self._lines_fd = os.open(folder / "records.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if self._run is not None:
            _write_run(folder, self._run)
        if compile_log is not None:
            self._compile_fd = os.open(folder / "compile.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._since = compile_log.mark()
            self._unlisten = compile_log.listen(self.add_compile)

    def append(self, snap: Snapshot) -> None:
        with self._lock:
            if self._closed:
                raise StorageError(f"recording {self.path} is closed; open a new session to record more")
            if self._log is not None and snap.graph not in self._planned:
                self._planned.add(snap.graph)
                plan = self._log.plan(snap.graph, before=self._since)
                if plan is not None:
                    _write_all(self._compile_fd, compile_line(plan).encode())
            line = self._entry(snap)
            _write_all(self._lines_fd, (json.dumps(line, allow_nan=False) + "\n").encode())

    def add_compile(self, entry: Entry) -> None:
        """A compile-log entry, written through (a run that dies mid-compile keeps what came before)."""
        with self._lock:
            if not self._closed and self._compile_fd >= 0:
                if isinstance(entry, GraphPlan):
                    self._planned.add(entry.graph)
                _write_all(self._compile_fd, compile_line(entry).encode())

    def _entry(self, snap: Snapshot) -> dict[str, Any]:
        meta = json_safe(snap.meta())
        meta["tensor"] = None
        if snap.tensor is not None:
            from safetensors.torch import save_file

            self._chunks += 1
            chunk = f"chunk-{os.getpid()}-{self._chunks:06d}.safetensors"
            tmp = self.path / (chunk + ".tmp")
            save_file({"t0": snap.tensor.detach().contiguous()}, str(tmp))
            os.replace(tmp, self.path / chunk)
            meta["tensor"] = {"chunk": chunk, "key": "t0"}
        return meta

    def close(self, *, run: RunInfo | None = None) -> None:
        if self._unlisten is not None:
            self._unlisten()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if run is not None:
                try:
                    _write_run(self.path, run)
                except OSError:
                    pass   # run.json keeps the start of the run; every hit is written already
            for fd in (self._lines_fd, self._compile_fd, self._lock_fd):
                if fd >= 0:
                    os.close(fd)   # closing the lock's descriptor releases the lock


def save(snapshots: list[Snapshot], path: str | Path, *, run: RunInfo | None = None,
         compile: list[Entry] | tuple[Entry, ...] = ()) -> Path:
    """Write a whole recording at once (replacing a dynstep recording at `path`, atomically)."""
    path = Path(path)

    def fill(folder: Path) -> None:
        _write_manifest(folder)
        if run is not None:
            _write_run(folder, run)
        (folder / "compile.jsonl").write_text("".join(compile_line(e) for e in compile), encoding="utf-8")
        tensors, lines, keys, storages = {}, [], {}, set()
        for i, snap in enumerate(snapshots):
            meta = json_safe(snap.meta())
            meta["tensor"] = None
            if snap.tensor is not None:
                key = keys.get(id(snap.tensor))
                if key is None:   # a tensor several snapshots hold is written once; a view of one written is copied
                    key = keys[id(snap.tensor)] = f"t{i}"
                    t = snap.tensor.detach().contiguous()
                    ptr = t.untyped_storage().data_ptr()
                    tensors[key] = t.clone() if ptr in storages else t
                    storages.add(ptr)
                meta["tensor"] = {"chunk": "chunk-0-000001.safetensors", "key": key}
            lines.append(json.dumps(meta, allow_nan=False) + "\n")
        if tensors:
            from safetensors.torch import save_file

            save_file(tensors, str(folder / "chunk-0-000001.safetensors"))
        (folder / "records.jsonl").write_text("".join(lines), encoding="utf-8")

    _install(path, fill)
    return path


def save_prepared(path: str | Path, lines: list[str], *, run: RunInfo | None = None,
                  compile: list[Entry] | tuple[Entry, ...] = (),
                  files: dict[str, bytes | Callable[[Path], None]] | None = None) -> Path:
    """Write a whole recording of stats-only snapshots whose records.jsonl lines the caller encoded
    (the flight recorder's dump, dynstep/flight/writer.py), with files of its own beside them (names
    OWN_FILES knows: flight.json, replay.json, replay.safetensors): their bytes, or a function that
    writes the file at the path it is given (no copy of a large file's bytes in memory first). Put in
    place like `save`."""
    path = Path(path)
    extra = dict(files or {})
    foreign = [name for name in extra if not OWN_FILES.match(name) or name in ("manifest.json", "records.jsonl")]
    if foreign:
        raise StorageError(f"cannot add {foreign} to a recording: not a file a recording holds")

    def fill(folder: Path) -> None:
        _write_manifest(folder)
        if run is not None:
            _write_run(folder, run)
        (folder / "compile.jsonl").write_text("".join(compile_line(e) for e in compile), encoding="utf-8")
        (folder / "records.jsonl").write_text("".join(lines), encoding="utf-8")
        for name, data in extra.items():
            if callable(data):
                data(folder / name)
            else:
                (folder / name).write_bytes(data)

    _install(path, fill)
    return path


def compile_line(entry: Entry) -> str:
    """compile.jsonl's line for a compile-log entry: {"type": "event" | "graph" | "kernels", ...fields}."""
    kind = "graph" if isinstance(entry, GraphPlan) else "kernels" if isinstance(entry, KernelCount) else "event"
    return json.dumps({"type": kind, **to_json(entry)}, allow_nan=False) + "\n"


def _write_run(folder: Path, run: RunInfo) -> None:
    tmp = folder / "run.json.tmp"
    tmp.write_text(json.dumps(to_json(run), indent=1), encoding="utf-8")
    os.replace(tmp, folder / "run.json")


# -- putting a recording in place, never deleting what dynstep did not write -------------------------

def _install(path: Path, fill: Any) -> None:
    """Build the recording in a sibling folder with `fill(folder)`, then rename it to `path`."""
    old = _replaceable(path)
    folder = path.parent / f".{path.name}.new-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir(parents=True)
        fill(folder)
    except BaseException as exc:
        shutil.rmtree(folder, ignore_errors=True)   # ours: made just above
        if isinstance(exc, OSError):
            raise StorageError(f"cannot write the recording {path}: {exc.strerror or exc}") from exc
        raise
    aside = path.parent / f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}" if old == "recording" else None
    try:
        if old == "empty":
            path.rmdir()
        elif aside is not None:
            os.rename(path, aside)
        os.rename(folder, path)
    except OSError as exc:
        if aside is not None and not os.path.lexists(path):
            os.rename(aside, path)   # put the old recording back
        if old == "absent" and os.path.lexists(path):
            _replaceable(path)       # someone else created it meanwhile: say who, when it is a recording
        raise StorageError(f"cannot put the recording in place at {path} ({exc.strerror or exc}); "
                           f"what was written is kept at {folder}") from exc
    if aside is not None:
        _remove_recording(aside)


def _replaceable(path: Path) -> str:
    """"absent", "empty" or "recording"; anything else (or a locked recording) is refused."""
    if not os.path.lexists(path):
        return "absent"
    if path.is_symlink() or not path.is_dir():
        raise StorageError(f"cannot record to {path}: it exists and is not a directory; choose a new path")
    names = sorted(p.name for p in path.iterdir())
    if not names:
        return "empty"
    if "manifest.json" not in names or not _is_recording(path):
        raise StorageError(f"cannot record to {path}: the directory is not empty and is not a dynstep "
                           "recording; choose a new path (dynstep never deletes what it did not write)")
    foreign = [n for n in names if not OWN_FILES.match(n)]
    if foreign:
        raise StorageError(f"cannot replace the recording {path}: it holds files dynstep did not write "
                           f"({', '.join(foreign[:5])}); move them away or choose a new path")
    holder = lock_holder(path)
    if holder is not None:
        raise StorageError(f"cannot replace the recording {path}: process {holder} is recording into it "
                           "(its lock is held); choose another path or wait until it finishes")
    return "recording"


def _is_recording(path: Path) -> bool:
    try:   # never through a link, never waiting on a FIFO named manifest.json
        info = json.loads(read_regular(path / "manifest.json"))
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and info.get("format") == FORMAT


def _remove_recording(folder: Path) -> None:
    """Remove a replaced recording: only the files dynstep writes, then the folder if it is empty."""
    for entry in folder.iterdir():
        if OWN_FILES.match(entry.name) and entry.is_file() and not entry.is_symlink():
            entry.unlink()
    try:
        folder.rmdir()
    except OSError:
        pass   # something new appeared in it: leave it where it is


def _write_manifest(folder: Path) -> None:
    (folder / "manifest.json").write_text(json.dumps({"format": FORMAT, "version": VERSION}), encoding="utf-8")


def _take_lock(folder: Path) -> int:
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StorageError(f"cannot record to {folder}: process {lock_holder(folder)} holds its lock") from None
    os.ftruncate(fd, 0)
    _write_all(fd, str(os.getpid()).encode())
    return fd


def lock_holder(path: Path) -> int | None:
    """The pid streaming into the recording at `path`, or None when nobody holds its lock."""
    lock = path / ".lock"
    if fcntl is None or lock.is_symlink() or not lock.is_file():
        return None
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except OSError:
        text = os.read(fd, 32).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@atexit.register
def _close_all() -> None:
    for w in list(_writers):
        try:
            w.close()
        except Exception:
            pass   # exiting: a writer that cannot close has written everything it was given already
