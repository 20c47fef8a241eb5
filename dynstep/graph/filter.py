"""Which recorded hits a selector names: `records(selector)` on sessions and recordings.

A hit belongs to a selector when that selector placed its probe, or when the hit's own facts
(op, node, module path, source line) match it with the selector's grammar. A list of selectors
placing one probe is a union: each hit is returned once, whichever selector placed it.

    filter_records(snaps, "op:layer_norm", kind="value")
    filter_records(snaps, "module:layers.1", None, rank=1)     # what rank 1 recorded
"""

from __future__ import annotations

import fnmatch

from ..core.records import Snapshot
from . import selectors as sel


def filter_records(snaps: list[Snapshot], selector: str | None, kind: str | None,
                   rank: int | None = None) -> list[Snapshot]:
    if rank is not None:
        snaps = [s for s in snaps if s.rank == rank]
    if kind is not None:
        snaps = [s for s in snaps if s.kind == kind]
    if selector is None:
        return list(snaps)
    parsed = sel.parse(selector)
    return [s for s in snaps if snapshot_matches(s, parsed)]


def snapshot_matches(snap: Snapshot, selector: sel.Selector) -> bool:
    """Does a recorded snapshot belong to what `selector` names (used by `records(selector)`)?"""
    if selector.kind == "*":
        return True
    if selector.text in snap.probe.split(" | "):
        return True
    if selector.kind == "op":
        return sel.op_matches(snap.target, selector.pattern)
    if selector.kind == "node":
        return fnmatch.fnmatchcase(snap.node, selector.pattern)
    if selector.kind == "module":   # every module the value is the return of (one value, nested modules)
        rx = sel.module_glob_regex(selector.pattern)
        return any(rx.match(m) for m in (snap.modules or (snap.module,))) and \
            any(p.startswith("module:") for p in snap.probe.split(" | "))
    if selector.kind == "in":
        rx = sel.module_glob_regex(selector.pattern)
        parts = snap.module.split(".")
        return any(rx.match(".".join(parts[:i])) for i in range(1, len(parts) + 1))
    if selector.kind == "line":
        file, _, line = snap.source.rpartition(":")
        return line == str(selector.line) and (file == selector.pattern or
                                               selector.pattern.endswith("/" + file) or
                                               file.endswith(selector.pattern.rsplit("/", 1)[-1]))
    return False
