"""Eager-vs-compiled diff (`dynstep.diff`): the first divergent op and the first NaN, by source line and module.

    report = dynstep.diff(model, x, backend="inductor")
    report.ok, report.first_divergence, report.show(), report.to_html("diff.html")

Modules: `judge` (reference runs and the judgement), `probed` (graph copies with probed
outputs), `engine` (per-graph diff, NaN origin, ladder), `search` (where a divergence starts,
in few compiles), `training` (gradients), `api` (entry points), `report` (dataclasses, JSON),
`repro` (a runnable repro of the first divergence), `kernels` (which Inductor kernel computed a
node). The engine only: the table and the HTML page are front ends (`dynstep.front.diff_show`,
`dynstep.front.diff_html`), reached through `DiffReport.show()` / `to_html()`.
"""

from __future__ import annotations

from .api import Collector, diff, diffing, superstep_report
from .judge import Tolerance
from .report import DiffReport, GraphDiff, LadderStep, NanOrigin, NodeDiff

__all__ = ["Collector", "DiffReport", "GraphDiff", "LadderStep", "NanOrigin", "NodeDiff", "Tolerance",
           "diff", "diffing", "superstep_report"]
