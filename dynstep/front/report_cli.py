"""`dynstep report RECORDING`: the HTML page, the terminal summary, JSON, TensorBoard, tlparse.

    dynstep report run.dynstep                       # run.report.html beside it, and a summary here
    dynstep report run.dynstep -o page.html --select "module:blocks.*" --json run.json
    dynstep report run.dynstep --tensorboard tb/ --tlparse trace/

`report(args)` is the verb (`dynstep.front.cli` wires it): it returns (ok, message, exit code)
and leaves printing the message to `main()`.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path

from ..core.errors import SelectorError, StorageError
from ..report import export
from ..report.model import RunReport, build
from ..report.tlparse import run_tlparse

Result = tuple[bool, str, int]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", help="a recording: session(path=...), Session.save, dynstep run --record")
    parser.add_argument("-o", "--output", metavar="HTML", help="the page to write (default: <recording>.report.html)")
    parser.add_argument("--select", action="append", default=[], metavar="SEL",
                        help="plot only values these selectors name (repeatable; the table keeps every hit)")
    parser.add_argument("--rank", type=int, default=None,
                        help="a distributed job's recording: the rank drawn (default 0); all are compared")
    parser.add_argument("--max-plots", type=int, default=48, help="most probed values drawn (default: 48)")
    parser.add_argument("--json", metavar="FILE", help="also write the report's content as JSON")
    parser.add_argument("--tensorboard", metavar="DIR", help="also export every probe's stats as TensorBoard scalars")
    parser.add_argument("--tlparse", metavar="TRACE", help="run tlparse on a TORCH_TRACE folder and link its report")


def report(args: argparse.Namespace) -> Result:
    from .report_html import render
    from .report_show import show_report

    loaded = _load(args.recording)
    if isinstance(loaded, str):
        return False, loaded, 1
    try:
        model = build(loaded, select=args.select, max_panels=args.max_plots, rank=args.rank)
    except SelectorError as exc:
        return False, f"dynstep report: --select: {str(exc).splitlines()[0]}", 2
    html_path = Path(args.output) if args.output else _default_output(Path(args.recording))
    wrote: list[tuple[str, str]] = []
    failed: list[str] = []
    tlparse_link = _tlparse(args.tlparse, html_path, wrote, failed) if args.tlparse else ""
    try:
        html_path.write_text(render(model, tlparse=tlparse_link), encoding="utf-8")
        wrote.insert(0, ("HTML", str(html_path)))
        _exports(args, model, wrote)
    except OSError as exc:
        return False, f"dynstep report: cannot write {exc.filename}: {exc.strerror}", 1
    show_report(model, wrote=wrote)
    if failed:
        return False, "dynstep report: " + "; ".join(failed), 1
    return True, "", 0


def _load(path_text: str):
    """The loaded recording, or the one-line reason it cannot be reported."""
    from ..recording.reader import load

    path = Path(path_text)
    if not os.path.lexists(path):
        return f"dynstep report: no recording at {path} (expected a folder written by dynstep.session(path=...), " \
               "Session.save or dynstep run --record)"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # its problems are shown with the report
            rec = load(path, tensors=False)
    except StorageError as exc:
        return f"dynstep report: {exc}"
    if not len(rec) and not rec.compile:
        why = f": {'; '.join(rec.problems[:3])}" if rec.problems else \
            " (nothing was probed: e.g. dynstep run --probe 'module:*' --record PATH script.py)"
        return f"dynstep report: {path}: the recording holds no probe hit and no compile event{why}"
    return rec


def _default_output(recording: Path) -> Path:
    name = recording.name[:-len(recording.suffix)] if recording.suffix else recording.name
    return recording.parent / f"{name or 'recording'}.report.html"


def _tlparse(trace: str, html_path: Path, wrote: list, failed: list) -> str:
    out = html_path.parent / (html_path.name.removesuffix(".html") + ".tlparse")
    result = run_tlparse(trace, out)
    if not result.ok:
        failed.append(f"--tlparse: {result.message}")
        return ""
    wrote.append(("tlparse", result.index + (f" ({result.message})" if result.message else "")))
    return os.path.relpath(result.index, html_path.parent)   # the page links it relative to itself


def _exports(args: argparse.Namespace, model: RunReport, wrote: list) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(export.to_dict(model), indent=1), encoding="utf-8")
        wrote.append(("JSON", args.json))
    if args.tensorboard:
        wrote.append(("TensorBoard", str(export.write_tensorboard(model, args.tensorboard))))
