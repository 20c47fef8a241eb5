"""Recording files: a directory of safetensors chunks plus JSON lines. Never pickle.

    run.dynstep/
      manifest.json            {"format": "dynstep-recording", "version": 1}
      records.jsonl            one JSON object per snapshot, in hit order
      chunk-000001.safetensors tensors of the snapshots that reference it

Writing is append-only: a chunk is written to a temporary name and renamed before the JSON
lines that reference it are appended, so a run that dies leaves every complete line loadable
(a torn last line is ignored on load). Buffered snapshots (at most `flush_every`) are written at
interpreter exit.

    save(snapshots, "run.dynstep");  rec = load("run.dynstep");  rec.records("op:layer_norm")
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import threading
import weakref
from pathlib import Path

import torch

from ..core.errors import StorageError
from ..core.records import Snapshot
from ..graph.filter import filter_records

FORMAT = "dynstep-recording"
VERSION = 1
_writers: "weakref.WeakSet[Writer]" = weakref.WeakSet()


class Writer:
    def __init__(self, path: Path, *, flush_every: int = 16) -> None:
        self.path = Path(path)
        self.flush_every = flush_every
        self._lock = threading.Lock()
        self._pending: list[Snapshot] = []
        self._chunks = 0
        self._closed = False
        _prepare_dir(self.path)
        (self.path / "manifest.json").write_text(json.dumps({"format": FORMAT, "version": VERSION}))
        self._lines = open(self.path / "records.jsonl", "a", encoding="utf-8")
        _writers.add(self)

    def append(self, snap: Snapshot) -> None:
        with self._lock:
            if self._closed:
                raise StorageError(f"recording {self.path} is closed; open a new session to record more")
            self._pending.append(snap)
            if len(self._pending) >= self.flush_every:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._pending or self._closed:
            return
        tensors = {f"t{i}": s.tensor.contiguous() for i, s in enumerate(self._pending) if s.tensor is not None}
        chunk = None
        if tensors:
            from safetensors.torch import save_file

            self._chunks += 1
            chunk = f"chunk-{os.getpid()}-{self._chunks:06d}.safetensors"
            tmp = self.path / (chunk + ".tmp")
            save_file(tensors, str(tmp))
            os.replace(tmp, self.path / chunk)
        lines = []
        for i, s in enumerate(self._pending):
            meta = s.meta()
            meta["tensor"] = {"chunk": chunk, "key": f"t{i}"} if s.tensor is not None else None
            lines.append(json.dumps(meta, allow_nan=True))
        self._lines.write("\n".join(lines) + "\n")
        self._lines.flush()
        self._pending.clear()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._flush_locked()
            self._closed = True
            self._lines.close()


def _prepare_dir(path: Path) -> None:
    if path.exists():
        if not path.is_dir():
            raise StorageError(f"cannot record to {path}: it exists and is not a directory")
        manifest = path / "manifest.json"
        if any(path.iterdir()) and not manifest.exists():
            raise StorageError(f"cannot record to {path}: the directory is not empty and is not a "
                               "dynstep recording; choose a new path")
        shutil.rmtree(path)
    path.mkdir(parents=True)


@atexit.register
def _flush_all() -> None:
    for w in list(_writers):
        try:
            w.close()
        except Exception:
            pass


def save(snapshots: list[Snapshot], path: Path) -> Path:
    writer = Writer(path, flush_every=max(1, len(snapshots)))
    for s in snapshots:
        writer.append(s)
    writer.close()
    return path


class Recording:
    """A loaded recording: the same reading interface as a session."""

    def __init__(self, snapshots: list[Snapshot], path: Path) -> None:
        self.path = path
        self._snaps = snapshots

    def all(self) -> list[Snapshot]:
        return list(self._snaps)

    def records(self, selector: str | None = None, *, kind: str | None = None) -> list[Snapshot]:
        return filter_records(self._snaps, selector, kind)

    def __len__(self) -> int:
        return len(self._snaps)

    def save(self, path: str | Path) -> Path:
        return save(self._snaps, Path(path))


def load(path: str | Path) -> Recording:
    path = Path(path)
    manifest = path / "manifest.json"
    if not manifest.exists():
        raise StorageError(f"{path} is not a dynstep recording (no manifest.json); "
                           "expected a directory written by Session.save or session(path=...)")
    info = json.loads(manifest.read_text())
    if info.get("format") != FORMAT or info.get("version") != VERSION:
        raise StorageError(f"{path}: unsupported recording format {info!r}; expected "
                           f"{{'format': {FORMAT!r}, 'version': {VERSION}}}")
    chunks: dict[str, dict[str, torch.Tensor]] = {}
    snaps = []
    records = path / "records.jsonl"
    text = records.read_text(encoding="utf-8") if records.exists() else ""
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            meta = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a line torn by a crash: everything before it is intact
        ref = meta.pop("tensor", None)
        tensor = None
        if ref:
            tensor = _chunk(path, ref["chunk"], chunks).get(ref["key"])
        snaps.append(Snapshot.from_meta(meta, tensor))
    return Recording(snaps, path)


def _chunk(path: Path, name: str, cache: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    if name not in cache:
        from safetensors.torch import load_file

        file = path / name
        cache[name] = load_file(str(file)) if file.exists() else {}
    return cache[name]
