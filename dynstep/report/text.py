"""Plain-text pieces of a report shared by its page and its terminal summary: the words, no markup.

    summary_rows(report)   -> [("calls (steps)", "2"), ...]
    ranks_line(report)     -> "ranks: showing rank 0 of 0, 1 (--rank N for another); every rank holds ..."
    nonfinite_line(snap)   -> "value of node gelu (torch.nn.functional.gelu) in blocks.1.mlp at model.py:45 ..."
    event_line(event)      -> "graph break ×3 at train.py:12 in f: Failed to trace builtin operator"
"""

from __future__ import annotations

import re

from ..core.records import Snapshot
from ..recording.facts import CompileEvent, KernelCount
from .model import RunReport

_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")


def function_name(name: str) -> str:
    """Dynamo's resume functions as a person reads them: "f (resumed after line 12)"."""
    m = _RESUME.match(name)
    return f"{m['fn']} (resumed after line {m['line']})" if m else name


def _listed(items: tuple[str, ...], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", and {len(items) - limit} more" if len(items) > limit else "") if items else "-"


def summary_rows(report: RunReport) -> list[tuple[str, str]]:
    s, run = report.summary, report.run
    rows = [("recording", report.path)]
    if run is not None:
        rows += [("versions", f"dynstep {run.dynstep} · torch {run.torch}" + (f" (CUDA {run.cuda})" if run.cuda else "")
                  + f" · Python {run.python}"),
                 ("platform", run.platform), ("command", " ".join(run.argv) or "-"),
                 ("time", f"{run.started} to {run.ended or '(not closed)'}")]
    devices = s.devices + tuple(f"cuda: {d}" for d in (run.devices if run else ()))
    rows += [("hits", f"{s.snapshots} ({s.values} values, {s.grads} gradients) at {s.sites} probe site(s)"),
             ("calls (steps)", str(s.calls)), ("probes", _listed(s.probes)), ("graphs", _listed(s.graphs)),
             ("devices", _listed(devices)), ("dtypes", _listed(s.dtypes)), ("inner compiler", _listed(s.inner)),
             ("options", "; ".join(f"{k}={v}" for k, v in s.options) or "-"),
             ("compile events", f"{s.compiles} compile(s), {s.graph_breaks} graph break(s), {s.recompiles} recompile(s)")]
    if run is not None and run.dropped:
        rows.append(("dropped", f"{run.dropped} hit(s) dropped by full rings (raise record= or summaries=)"))
    if report.kernels:
        rows.append(("kernels", "; ".join(kernel_text(c) for c in report.kernels)))
    return rows


def ranks_line(report: RunReport) -> str:
    """A distributed job's recording: the rank shown, and the first value where a rank differs from rank 0."""
    head = f"ranks: showing rank {report.rank} of {', '.join(map(str, report.ranks))} (--rank N for another)"
    if not report.rank_differences:
        return head + "; every rank holds the same values as rank 0"
    d = report.rank_differences[0]
    return (f"{head}; first value that differs from rank 0: {d.node} ({d.module or '<top>'}, {d.source}) call "
            f"{d.call} on rank {d.rank}; {len(report.rank_differences)} value(s) differ in all")


def kernel_text(c: KernelCount) -> str:
    """'f[0/0] forward: 8 kernels (7 without probes: +1), 12 probe(s) computed in the kernels, 0 on a ...'."""
    without = "" if c.added is None else f" ({c.unprobed} without probes: {c.added:+d})"
    return (f"{c.graph} {c.phase}: {c.kernels if c.kernels >= 0 else '?'} kernels{without}, "
            f"{c.fused} probe(s) computed in the kernels, {c.extern} on a materialised value")


def nonfinite_line(s: Snapshot) -> str:
    what = "gradient flowing into" if s.kind == "grad" else "value of"
    module = f" in {s.module}" if s.module else ""
    text = f"  `{s.source_text}`" if s.source_text else ""
    return (f"{what} node {s.node} ({s.target}){module} at {s.source or '?'}{text} — graph {s.graph}, call {s.call}: "
            f"{s.stats.nan} NaN, {s.stats.inf} Inf")


def event_line(e: CompileEvent) -> str:
    kind = e.kind.replace("_", " ")
    count = f" ×{e.count}" if e.count > 1 else ""
    where = f" at {e.where}" + (f" in {function_name(e.function)}" if e.function else "")
    return f"{kind}{count}{where}: {e.reason}"
