"""Reports of a run: what a report of a recording is made of, and its exports.

The engine side of `dynstep report` (the page, the terminal summary and the CLI verb are front
ends, in `dynstep.front`; the recording it reads is `dynstep.recording`). Above `recording`.

    model        the report of a recording: run summary, per-site series, first non-finite, graphs
    text         the report's words, shared by its page and its terminal summary (summary rows, lines)
    page_data    the numbers the page draws and lists: a series reduced for its chart, the hits table
    histogram    one recorded tensor's distribution (a panel's most telling hit)
    leadup       a flight recorder's dump: per-module curves over the steps before its trigger
    export       the report as JSON, and scalars and histograms for TensorBoard (no tensorboard needed)
    tlparse      running tlparse on a TORCH_TRACE folder

Here for now, on their way into `dynstep.recording` (issue 27: they move once the branches that edit
them have merged): the process's compile log and its collector on torch's trace logger
(`compile_log`), torch's structured-trace records read as compile events (`trace_events`).
"""

import sys
from typing import Any

from ..recording import facts as _facts

# `dynstep.report.records` and `dynstep.report.plans` are the old homes of `dynstep.recording.facts` and
# `dynstep.recording.plans`, still named by files other branches of this wave edit (compile_log.py,
# trace_events.py, front/runner.py, backends/superstep.py): issue 27 items 5 and 8, remove once they
# name the new ones. `plans` is loaded on first use (it reads FX graphs).
sys.modules.setdefault(f"{__name__}.records", _facts)


def __getattr__(name: str) -> Any:
    if name == "records":
        return _facts
    if name == "plans":
        from ..recording import plans

        return plans
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
