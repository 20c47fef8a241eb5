"""Reading recordings: `dynstep.load(path)` -> `Recording`, the same reading interface as a session.

Loading never fails on part of a recording: each JSON line is checked against the snapshot schema
and what is valid loads; a line that is not, a chunk that cannot be read, an incomplete last line
(a run cut mid-write) are listed in `Recording.problems`, with one warning. The same holds for
the run's facts (run.json: `Recording.run`) and its compile log (compile.jsonl:
`Recording.compile_events`, `Recording.plans`), which recordings older than them lack. Only what cannot be a
recording at all (no manifest, another format, a newer version) is a `StorageError`.

Nothing outside the recording is read: a chunk must be named by a plain file name inside the
recording's directory (any other name makes the whole load a `StorageError`), and only regular
files are opened, never through a link (files.read_regular: a symlinked, FIFO or device chunk, run.json
or compile.jsonl is reported as unreadable; a `rank<N>` that is a symlink is not merged, and said).
A recording without its index (records.jsonl missing or unreadable) is a `StorageError`, never an
empty recording.

    rec = dynstep.load("run.dynstep");  rec.records("op:layer_norm");  rec.problems
    dynstep.load("run.dynstep", tensors=False)      # stats and facts only: fast for large recordings
    rec.records("module:layers.1", rank=1)     # a distributed job's run.dynstep/rank<N>/, merged
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..core.errors import StorageError
from ..core.records import STAT_FIELDS, Snapshot, Stats
from ..graph.filter import filter_records
from ..graph.identity import fill_identities
from ..recording.compile_log import Entry
from .facts import CompileEvent, GraphPlan, KernelCount, RunInfo, from_json
from .files import read_regular as _read_regular
from .files import what_is
from .flight_facts import FlightInfo, Trigger, flight_from_json
from .paths import rank_dirs, rank_others
from .storage import FORMAT, READS, save

CHUNK_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.safetensors$")
KINDS = ("value", "grad")
_STR_FIELDS = ("probe", "node", "target", "module", "source", "graph", "dtype", "device")


class Recording:
    """A loaded recording: `records(selector)`, `all()`, `save(path)`, the run's facts and compile
    log, and what could not load."""

    def __init__(self, snapshots: list[Snapshot], path: Path, problems: tuple[str, ...] = (), *,
                 run: RunInfo | None = None, compile: tuple[Entry, ...] = (),
                 lazy: dict[tuple, Callable[[], torch.Tensor | None]] | None = None,
                 flight: FlightInfo | None = None) -> None:
        self.path = path
        self._snaps = snapshots
        self.problems = problems
        self.run = run
        self.compile = compile
        self._lazy = lazy or {}
        self.flight = flight      # a flight recorder's dump: its trigger and window (flight.json), else None

    @property
    def trigger(self) -> Trigger | None:
        """Why a flight recorder's dump was written (kind, step, node, module, source, graph, phase);
        None for any other recording."""
        return self.flight.trigger if self.flight is not None else None

    def tensor_of(self, snapshot: Snapshot) -> torch.Tensor | None:
        """A snapshot's tensor, read now when the recording was loaded with `tensors=False` (None: the
        hit kept no tensor, e.g. a `summary` probe, or its chunk cannot be read)."""
        if snapshot.tensor is not None:
            return snapshot.tensor
        read = self._lazy.get(snapshot.hit)
        return read() if read is not None else None

    @property
    def compile_events(self) -> list[CompileEvent]:
        """Compiles, graph breaks and recompiles, in the order they happened."""
        return [e for e in self.compile if isinstance(e, CompileEvent)]

    @property
    def plans(self) -> list[GraphPlan]:
        """The graphs superstep instrumented, with every probe and stop point by node."""
        return [e for e in self.compile if isinstance(e, GraphPlan)]

    @property
    def kernel_counts(self) -> list[KernelCount]:
        """Per probed graph, the kernels Inductor generated with the probes (and without, when measured)."""
        return [e for e in self.compile if isinstance(e, KernelCount)]

    def all(self) -> list[Snapshot]:
        return list(self._snaps)

    def records(self, selector: str | None = None, *, kind: str | None = None,
                rank: int | None = None) -> list[Snapshot]:
        """Snapshots filtered by selector, kind and rank (a distributed job's recording holds every rank)."""
        return filter_records(self._snaps, selector, kind, rank)

    @property
    def ranks(self) -> list[int]:
        return sorted({s.rank for s in self._snaps})

    def compare_ranks(self, selector: str | None = None, **tolerance: float) -> list:
        """Hits whose value differs between ranks: per hit, the first rank that differs from rank 0
        (dynstep.jobs.compare.RankDifference), for values every rank should hold alike."""
        from ..jobs.compare import compare_ranks

        return compare_ranks(self.records(selector), **tolerance)

    def __len__(self) -> int:
        return len(self._snaps)

    def save(self, path: str | Path) -> Path:
        return save(self._snaps, Path(path), run=self.run, compile=self.compile)

    def __repr__(self) -> str:
        return f"<dynstep Recording {self.path}: {len(self)} snapshot(s), {len(self.problems)} problem(s)>"


def load(path: str | Path, *, tensors: bool = True) -> Recording:
    """Read a recording; `tensors=False` leaves every snapshot's tensor out (None) and reads no chunk."""
    path = Path(path)
    ranks, others = rank_dirs(path), rank_others(path)
    skipped = [f"{p.name} is {what_is(p) or 'a file'}, not a rank's directory; not merged" for p in others]
    if ranks:
        return _merge(path, [_load_one(p, tensors) for p in ranks], skipped)
    if skipped and not (path / "manifest.json").exists():
        raise StorageError(f"{path}: no rank of this job's recording can be read: {'; '.join(skipped)}")
    return _load_one(path, tensors)


def _merge(path: Path, parts: list[Recording], skipped: list[str]) -> Recording:
    """A distributed job's recording: every rank's snapshots, rank by rank, each in hit order; the
    run's facts and compile log are the lowest rank's (every rank compiles the same graphs)."""
    snaps = [s for part in parts for s in part.all()]
    problems = tuple(skipped) + tuple(f"{part.path.name}: {p}" for part in parts for p in part.problems)
    if skipped:
        warnings.warn(f"dynstep.load({str(path)!r}): {'; '.join(skipped)}", RuntimeWarning, stacklevel=3)
    lazy = {k: v for part in parts for k, v in part._lazy.items()}
    return Recording(snaps, path, problems, run=parts[0].run, compile=parts[0].compile, lazy=lazy)


def _load_one(path: Path, tensors: bool) -> Recording:
    _check_manifest(path)
    problems: list[str] = []
    chunks = _Chunks(path, problems, read=tensors)
    snaps = []
    lazy: dict[tuple, Callable[[], torch.Tensor | None]] = {}
    for number, meta in _lines(path / "records.jsonl", problems, required=True):
        try:
            snaps.append(_snapshot(meta, chunks))
        except _Invalid as exc:
            problems.append(f"records.jsonl line {number}: {exc}; line skipped")
            continue
        if not tensors and meta.get("tensor") is not None:   # checked by _snapshot: a plain chunk name
            lazy[snaps[-1].hit] = functools.partial(chunks.fetch, meta["tensor"])
    chunks.report()
    snaps = fill_identities(snaps)   # hits recorded before identities existed get one from their fields
    run = _run(path / "run.json", problems)
    compile = tuple(_compile(path / "compile.jsonl", problems))
    flight = _flight(path / "flight.json", problems)
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        warnings.warn(f"dynstep.load({str(path)!r}): {len(snaps)} snapshot(s) loaded, {len(problems)} problem(s): "
                      f"{shown} (all in Recording.problems)", RuntimeWarning, stacklevel=3)
    return Recording(snaps, path, tuple(problems), run=run, compile=compile, lazy=lazy, flight=flight)


def _flight(file: Path, problems: list[str]) -> FlightInfo | None:
    """flight.json of a flight recorder's dump (dynstep.flight), or None for any other recording."""
    if not file.exists():
        return None
    try:
        return flight_from_json(json.loads(_read_regular(file)))
    except (OSError, ValueError) as exc:
        problems.append(f"flight.json cannot be read ({exc}); the trigger is left out")
        return None


def _run(file: Path, problems: list[str]) -> RunInfo | None:
    if not os.path.lexists(file):
        return None   # recorded before run.json existed
    try:
        return from_json(RunInfo, json.loads(_read_regular(file)))
    except (OSError, ValueError) as exc:
        problems.append(f"run.json cannot be read ({exc}); the run's facts are left out")
        return None


def _compile(file: Path, problems: list[str]):
    kinds: dict[str, type] = {"event": CompileEvent, "graph": GraphPlan, "kernels": KernelCount}
    for number, raw in _lines(file, problems):
        kind = kinds.get(raw.get("type")) if isinstance(raw, dict) else None
        if kind is None:
            problems.append(f"compile.jsonl line {number}: not an entry this dynstep knows "
                            f"(type {(raw.get('type') if isinstance(raw, dict) else raw)!r:.40}); line skipped")
            continue
        try:
            yield from_json(kind, raw)
        except ValueError as exc:
            problems.append(f"compile.jsonl line {number}: {exc}; line skipped")


def _check_manifest(path: Path) -> None:
    manifest = path / "manifest.json"
    kind = what_is(manifest) if path.is_dir() else "missing"
    if kind == "missing":
        raise StorageError(f"{path} is not a dynstep recording (no manifest.json); "
                           "expected a directory written by Session.save or session(path=...)")
    if kind is not None:
        raise StorageError(f"{manifest}: the manifest is {kind}; expected the regular file Session.save "
                           "or session(path=...) writes")
    try:
        info = json.loads(_read_regular(manifest))
    except (ValueError, OSError) as exc:
        raise StorageError(f"{manifest}: not a readable dynstep manifest ({exc}); expected "
                           f'{{"format": "{FORMAT}", "version": N}}') from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise StorageError(f"{path}: not a dynstep recording (manifest {info!r}); expected format {FORMAT!r}")
    version = info.get("version")
    if not isinstance(version, int) or version not in READS:
        newer = isinstance(version, int) and version > max(READS)
        raise StorageError(f"{path}: recording format version {version!r} "
                           + ("was written by a newer dynstep; upgrade dynstep to read it" if newer else
                              f"is not one this dynstep reads ({', '.join(map(str, READS))})"))


def _lines(records: Path, problems: list[str], *, required: bool = False):
    """(line number, parsed JSON object) of every complete, parseable line. A `required` file (the
    index, records.jsonl) that is missing or unreadable is a StorageError; another is a problem."""
    name = records.name
    if not required and not os.path.lexists(records):
        return                                   # recorded before the file existed
    try:
        data = _read_regular(records)
    except OSError as exc:
        why = "is missing" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc})"
        if required:
            raise StorageError(f"{records.parent}: its index {name} {why}; a recording's snapshots are listed "
                               "there, so nothing can be loaded (its chunks alone say nothing of the hits)") from None
        problems.append(f"{name} {why}; nothing in it loaded")
        return
    lines = data.split(b"\n")
    tail = lines.pop()   # after the last newline: b"" unless the run was cut mid-write
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            yield number, json.loads(raw)
        except ValueError as exc:
            problems.append(f"{name} line {number} is not JSON ({exc.__class__.__name__}: {exc}); line skipped")
    if tail.strip():
        where = "" if name == "records.jsonl" else f"{name}: "   # records.jsonl's message predates the others
        problems.append(f"{where}ignored {len(tail)} trailing byte(s) of an incomplete last line (a run cut mid-write)")


class _Invalid(ValueError):
    pass


def _snapshot(meta: Any, chunks: "_Chunks") -> Snapshot:
    if not isinstance(meta, dict):
        raise _Invalid(f"expected a JSON object, got {type(meta).__name__}")
    values: dict[str, Any] = {}
    kind = meta.get("kind")
    if kind not in KINDS:
        raise _Invalid(f"field 'kind' must be one of {list(KINDS)}, got {kind!r}")
    values["kind"] = kind
    for name in _STR_FIELDS:
        values[name] = _field(meta, name, str)
    values["call"] = _count(meta, "call")
    shape = meta.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise _Invalid(f"field 'shape' must be a list of non-negative integers, got {shape!r}")
    values["shape"] = tuple(shape)
    values["stats"] = _stats(meta.get("stats"))
    for name, default in (("site", -1), ("seq", 0), ("rank", 0), ("world_size", 1), ("step", -1)):
        values[name] = _field(meta, name, int, default)
    values["source_text"] = _field(meta, "source_text", str, "")
    values["identity"] = _field(meta, "identity", str, "")   # older recordings: filled in by _load_one
    modules = meta.get("modules", [])     # absent in recordings before issue 25
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise _Invalid(f"field 'modules' must be a list of module paths, got {modules!r}")
    values["modules"] = tuple(modules)
    values["tensor"] = chunks.tensor(meta.get("tensor"))
    return Snapshot(**values)


def _field(meta: dict, name: str, kind: type, default: Any = ...) -> Any:
    value = meta.get(name, default)
    if value is ... or not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise _Invalid(f"field {name!r} must be {kind.__name__}, got {meta.get(name, '<missing>')!r}")
    return value


def _count(meta: dict, name: str) -> int:
    value = _field(meta, name, int)
    if value < 0:
        raise _Invalid(f"field {name!r} must be >= 0, got {value}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, str) and value in ("nan", "inf", "-inf", "NaN", "Infinity", "-Infinity"):
        return float(value.replace("Infinity", "inf"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise _Invalid(f"a stats value must be a number (or 'nan', 'inf', '-inf'), got {value!r}")


def _stats(raw: Any) -> Stats:
    if not isinstance(raw, dict):
        raise _Invalid(f"field 'stats' must be an object with {list(STAT_FIELDS)}, got {raw!r}")
    out: dict[str, Any] = {}
    for key in STAT_FIELDS:
        if key not in raw:
            continue
        number = _number(raw[key])
        if key in ("nan", "inf", "count"):
            if not math.isfinite(number) or number < 0 or number != int(number):
                raise _Invalid(f"stats {key!r} must be a non-negative integer, got {raw[key]!r}")
            out[key] = int(number)
        else:
            out[key] = number
    return Stats(**out)


class _Chunks:
    """Tensors by chunk name, read once each; what cannot be read is reported, not raised."""

    def __init__(self, folder: Path, problems: list[str], *, read: bool = True) -> None:
        self.folder, self.problems, self.read = folder, problems, read
        self.cache: dict[str, dict[str, torch.Tensor] | None] = {}
        self.last: tuple[str, dict[str, torch.Tensor] | None] | None = None   # fetch's one chunk
        self.missing: dict[str, int] = {}

    def tensor(self, ref: Any) -> torch.Tensor | None:
        if ref is None:
            return None
        if not isinstance(ref, dict) or not isinstance(ref.get("chunk"), str) or not isinstance(ref.get("key"), str):
            raise _Invalid(f"field 'tensor' must be null or {{'chunk': NAME, 'key': KEY}}, got {ref!r}")
        name = ref["chunk"]
        if not CHUNK_NAME.match(name):
            raise StorageError(f"{self.folder}: a record names the chunk {name!r}, which is not a plain "
                               "*.safetensors file name inside the recording; refusing to read outside it")
        if not self.read:
            return None
        tensors = self._load(name)
        tensor = tensors.get(ref["key"]) if tensors is not None else None
        if tensor is None:
            self.missing[name] = self.missing.get(name, 0) + 1
        return tensor

    def fetch(self, ref: dict[str, str]) -> torch.Tensor | None:
        """A checked reference's tensor, read now (the lazy path of a `tensors=False` load). Only the
        last chunk read is kept: a report reads a few hits of a recording that may not fit in memory."""
        name = ref["chunk"]
        if self.last is None or self.last[0] != name:
            self.last = None                      # the old chunk goes before the next is read
            self.last = (name, self._read(name))
        tensors = self.last[1]
        return tensors.get(ref["key"]) if tensors is not None else None

    def _load(self, name: str) -> dict[str, torch.Tensor] | None:
        if name not in self.cache:
            self.cache[name] = self._read(name)
        return self.cache[name]

    def _read(self, name: str) -> dict[str, torch.Tensor] | None:
        try:
            from safetensors.torch import load as load_bytes

            return load_bytes(_read_regular(self.folder / name))
        except Exception as exc:   # missing, not a regular file, truncated, not safetensors
            self.problems.append(f"chunk {name} cannot be read ({type(exc).__name__}: {exc})")
            return None

    def report(self) -> None:
        for name, count in self.missing.items():
            self.problems.append(f"{count} snapshot(s) load without their tensor (chunk {name})")
