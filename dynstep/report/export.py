"""A report as JSON (`dynstep report --json`) and as TensorBoard scalars (`--tensorboard DIR`).

    to_dict(report)                      -> the page's content as JSON-ready data (NaN as "nan")
    write_tensorboard(report, "tb/")     -> tb/events.out.tfevents.<time>.<host>.dynstep

The TensorBoard file is written here, with the standard library: a TFRecord stream of `Event`
protocol buffers (tensorflow/core/util/event.proto: wall_time = 1, step = 2, file_version = 3,
summary = 5; summary.proto: Summary.value = 1, Value.tag = 1, Value.simple_value = 2), each
record framed as length, masked CRC-32C of the length, data, masked CRC-32C of the data. So
exporting needs neither tensorboard nor tensorflow; `tensorboard --logdir DIR` reads it. Tags are
``value/<module or graph>/<node>/<stat>`` and ``grad/...``; the step is the call index (the hit's
position when recompiled copies of a graph restart their count).
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

from ..core.jsonsafe import json_safe
from ..recording.facts import to_json
from .histogram import Histogram
from .model import STATS, Panel, RunReport, Series, panels_of

FORMAT = "dynstep-report"
VERSION = 1


def to_dict(report: RunReport) -> dict[str, Any]:
    out = _content(report)
    if report.rank is not None:   # a distributed job's recording
        out["ranks"] = json_safe({"shown": report.rank, "all": list(report.ranks),
                                  "differences": to_json(report.rank_differences)})
    return out


def _content(report: RunReport) -> dict[str, Any]:
    return json_safe({
        "format": FORMAT, "version": VERSION, "recording": report.path, "run": to_json(report.run),
        "summary": to_json(report.summary), "problems": list(report.problems), "selected": list(report.selected),
        "first_nonfinite": report.first_nonfinite.meta() if report.first_nonfinite is not None else None,
        "events": to_json(report.events), "compiles": to_json(report.compiles), "graphs": to_json(report.plans),
        "panels": to_json(report.panels), "panels_left_out": report.left_out,
        "sources": to_json(report.sources), "kernels": to_json(report.kernels),
        "hits": [s.meta() for s in report.hits]})


# -- TensorBoard -------------------------------------------------------------------------------

def write_tensorboard(report: RunReport, folder: str | Path) -> Path:
    """Scalars of every probed value (all panels, drawn or not) into a new event file in `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.dynstep"
    wall = time.time()
    records = [_event(wall, 0, file_version="brain.Event:2")]
    for panel in _all_panels(report):
        for series in (panel.value, panel.grad):
            if series is not None:
                records += [_event(wall, step, values=values) for step, values in _scalars(panel, series)]
    for panel in report.panels:     # the drawn panels' distributions (report/histogram.py)
        for h in (panel.value_histogram, panel.grad_histogram):
            if h is not None and h.counts:
                records.append(_event(wall, h.call, histograms=[(f"{h.kind}/{panel.module or panel.graph}/{panel.node}",
                                                                  _histogram_proto(h))]))
    with open(path, "xb") as fh:
        fh.write(b"".join(_frame(r) for r in records))
    return path


def _all_panels(report: RunReport) -> list[Panel]:
    return [p for p, _ in panels_of(report.hits)]   # every panel, not only the ones the page draws


def _scalars(panel: Panel, series: Series):
    name = f"{series.kind}/{panel.module or panel.graph}/{panel.node}"
    calls = series.calls
    if any(a >= b for a, b in zip(calls, calls[1:])):   # recompiled copies count from 0 again: number the hits
        calls = tuple(range(len(calls)))
    for i, call in enumerate(calls):
        values = [(f"{name}/{k}", getattr(series, k)[i]) for k in STATS]
        values += [(f"{name}/nan", float(series.nan[i])), (f"{name}/inf", float(series.inf[i]))]
        yield call, values


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _event(wall: float, step: int, *, file_version: str = "", values: list[tuple[str, float]] = (),
           histograms: list[tuple[str, bytes]] = ()) -> bytes:
    """An Event: wall_time (1), step (2), file_version (3) or a Summary (5) of Values: tag (1) with
    simple_value (2, float) or histo (5, a HistogramProto)."""
    out = b"\x09" + struct.pack("<d", wall) + b"\x10" + _varint(step)
    if file_version:
        out += _bytes_field(3, file_version.encode())
    summary = b"".join(_bytes_field(1, _bytes_field(1, tag.encode()) + b"\x15" + struct.pack("<f", v))
                       for tag, v in values)
    summary += b"".join(_bytes_field(1, _bytes_field(1, tag.encode()) + _bytes_field(5, histo)) for tag, histo in histograms)
    if summary:
        out += _bytes_field(5, summary)
    return out


def _histogram_proto(h: Histogram) -> bytes:
    """HistogramProto: min (1), max (2), num (3), sum (4), sum_squares (5) as doubles, then bucket_limit (6,
    each bucket's right edge) and bucket (7, its count), packed. Sums from the bucket centres (the
    recorded tensor is not at hand here)."""
    centres = [(a + b) / 2 for a, b in zip(h.edges, h.edges[1:])]
    total = sum(c * n for c, n in zip(centres, h.counts))
    squares = sum(c * c * n for c, n in zip(centres, h.counts))
    doubles = (h.edges[0], h.edges[-1], float(sum(h.counts)), total, squares)
    out = b"".join(_varint(number << 3 | 1) + struct.pack("<d", v) for number, v in enumerate(doubles, 1))
    out += _bytes_field(6, struct.pack(f"<{len(h.counts)}d", *h.edges[1:]))
    return out + _bytes_field(7, struct.pack(f"<{len(h.counts)}d", *map(float, h.counts)))


def _frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked_crc(length)) + data + struct.pack("<I", _masked_crc(data))


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_tensorboard(path: str | Path) -> list[tuple[int, str, float]]:
    """(step, tag, value) of every scalar in an event file this module wrote, CRCs checked (for tests)."""
    data, out, pos = Path(path).read_bytes(), [], 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        record = data[pos + 12:pos + 12 + length]
        if struct.unpack_from("<I", data, pos + 12 + length)[0] != _masked_crc(record):
            raise ValueError(f"{path}: bad CRC in the record at byte {pos}")
        out += _scalars_in(record)
        pos += 16 + length
    return out


def read_tensorboard_histograms(path: str | Path) -> list[tuple[int, str, list[float], list[float]]]:
    """(step, tag, bucket right edges, bucket counts) of every histogram in an event file this module wrote."""
    data, out, pos = Path(path).read_bytes(), [], 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        fields = dict(_fields(data[pos + 12:pos + 12 + length]))
        for _, value in _fields(fields.get(5, b"")):
            inner = dict(_fields(value))
            if 5 in inner:
                histo = dict(_fields(inner[5]))
                unpack = lambda raw: list(struct.unpack(f"<{len(raw) // 8}d", raw))   # noqa: E731
                out.append((fields.get(2, 0), inner[1].decode(), unpack(histo[6]), unpack(histo[7])))
        pos += 16 + length
    return out


def _scalars_in(event: bytes) -> list[tuple[int, str, float]]:
    fields = dict(_fields(event))
    summary = fields.get(5)
    if summary is None:
        return []
    out = []
    for number, value in _fields(summary):
        inner = dict(_fields(value))
        if 2 in inner:
            out.append((fields.get(2, 0), inner[1].decode(), struct.unpack("<f", inner[2])[0]))
    return out


def _fields(data: bytes):
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            size, pos = _read_varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        yield number, value


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def tensorboard_files(folder: str | Path) -> list[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("events.out.tfevents."))
