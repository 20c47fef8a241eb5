"""Eager-vs-compiled diff (`dynstep.diff`): the first divergent op and the first NaN, by source line and module.

    report = dynstep.diff(model, x, backend="inductor")
    report.ok, report.first_divergence, report.show(), report.to_html("diff.html")

Modules: `judge` (reference runs and the judgement), `probed` (graph copies with probed
outputs), `engine` (per-graph diff, NaN origin, ladder), `search` (where a divergence starts,
in few compiles), `training` (gradients), `api` (entry points), `report` (dataclasses, JSON), `html`, `repro`, and `show` (the only module
that uses rich).
"""

from __future__ import annotations

from .api import Collector, diff, diffing, superstep_report
from .judge import Tolerance
from .report import DiffReport, GraphDiff, LadderStep, NanOrigin, NodeDiff

__all__ = ["Collector", "DiffReport", "GraphDiff", "LadderStep", "NanOrigin", "NodeDiff", "Tolerance",
           "diff", "diffing", "superstep_report"]
