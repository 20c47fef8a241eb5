"""`dynstep report`'s page: one self-contained HTML file for a `RunReport`.

Everything is inline (style, script, charts as SVG drawn by `report_charts`), and a
Content-Security-Policy forbids every fetch, so the page works from a file URL and makes no
request. The policy admits only the page's own script, by its hash: a string from the recording
that escaped into markup still could not run. Every string from user code (module names, source
lines, selectors, reasons) is escaped, and the JSON the script reads is written with ``<``,
``>`` and ``&`` escaped so nothing in it can close its ``<script>`` block.

    text = render(report, tlparse="run.tlparse/index.html")
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from html import escape
from typing import Any

from ..core.records import Snapshot
from ..recording.facts import CompileEvent, GraphPlan, PlanRow
from ..report.model import Panel, RunReport
from ..report.page_data import hits_table, tooltip_points
from ..report.text import function_name, summary_rows
from . import report_charts as charts
from .report_assets import CSS, JS
from .report_leadup import section as leadup_section

MAX_PLAN_ROWS = 300


def render(report: RunReport, *, tlparse: str = "") -> str:
    points: dict[str, Any] = {}
    body = "\n".join([_banners(report), leadup_section(report), _summary(report, tlparse), _plots(report, points),
                      _events(report), _graphs(report), _hits_section(), _sources(report)])
    digest = base64.b64encode(hashlib.sha256(JS.encode()).digest()).decode()
    csp = f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:"
    lead = (("leadup", "Lead-up"),) if report.leadup is not None else ()
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in (*lead, ("summary", "Summary"), ("plots", "Plots"),
                  ("events", "Graph breaks &amp; recompiles"), ("graphs", "Graphs"), ("hits", "Hits"),
                  ("sources", "Source lines")))
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            f"<title>dynstep report \u00b7 {escape(os.path.basename(report.path))}</title><style>{CSS}</style></head>\n"
            f'<body><header><h1>dynstep report</h1><div class="sub">{escape(report.path)}</div></header>'
            f"<nav>{nav}</nav><main>\n{body}\n</main><div id=\"tip\"></div>\n"
            f'<script type="application/json" id="dynstep-hits">{_json(hits_table(report))}</script>\n'
            f'<script type="application/json" id="dynstep-points">{_json(points)}</script>\n'
            f"<script>{JS}</script>\n</body></html>\n")


def _json(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _link(report: RunReport, source: str, path: str = "") -> str:
    key = report.source_key(source, path)
    shown = escape(source or "?")
    title = f' title="{escape(path)}"' if path else ""
    return f'<a href="#{key}"{title}>{shown}</a>' if key else shown


def _banners(report: RunReport) -> str:
    parts = []
    bad = report.first_nonfinite
    if bad is not None:
        hit = (f' &middot; <a href="#{report.first_nonfinite_panel}">plot</a>' if report.first_nonfinite_panel else "")
        parts.append(f'<div class="banner" id="first-nonfinite"><b>First non-finite value:</b> {_bad_text(report, bad)}'
                     f'{hit} &middot; <a href="#hits" id="goto-first">hit #{bad.seq}</a></div>')
    elif report.hits:
        parts.append(f'<div class="banner ok">No NaN or Inf in {len(report.hits)} recorded hit(s).</div>')
    if report.problems:
        items = "".join(f"<li>{escape(p)}</li>" for p in report.problems)
        parts.append(f'<div class="banner problems"><b>The recording has {len(report.problems)} problem(s); '
                     f"what could be read is shown:</b><ul>{items}</ul></div>")
    return "\n".join(parts)


def _bad_text(report: RunReport, s: Snapshot) -> str:
    what = "gradient flowing into" if s.kind == "grad" else "value of"
    module = f" in <code>{escape(s.module)}</code>" if s.module else ""
    text = f" <code>{escape(s.source_text)}</code>" if s.source_text else ""
    return (f"{what} node <code>{escape(s.node)}</code> ({escape(s.target)}){module} at {_link(report, s.source)}"
            f"{text} &mdash; graph {escape(s.graph)}, call {s.call}: {s.stats.nan} NaN, {s.stats.inf} Inf "
            f"of {s.stats.count + s.stats.nan + s.stats.inf} elements")


def _summary(report: RunReport, tlparse: str) -> str:
    rows = [f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in summary_rows(report)]
    if tlparse:
        rows.append(f'<tr><th>tlparse</th><td><a href="{escape(tlparse)}">compile-time report (tlparse)</a></td></tr>')
    half = (len(rows) + 1) // 2
    tables = "".join(f'<table class="kv">{"".join(part)}</table>' for part in (rows[:half], rows[half:]))
    return f'<section id="summary"><h2>Run summary</h2><div class="cols">{tables}</div></section>'


def _plots(report: RunReport, points: dict[str, Any]) -> str:
    if not report.panels:
        return '<section id="plots"><h2>Values and gradients</h2><p>No probe hit was recorded.</p></section>'
    more = (f" {report.left_out} more probed value(s) are not drawn (the table has every hit; choose with "
            "<code>dynstep report --select SEL</code>)." if report.left_out else "")
    panels = "\n".join(_panel(report, p, points) for p in report.panels)
    return (f'<section id="plots"><h2>Values and gradients, call by call</h2><p>{len(report.panels)} probed value(s); '
            f"left: the value, right: the gradient flowing into it.{more}</p>"
            f'<div class="controls"><input type="search" id="panel-filter" placeholder="filter plots: module, node, op, line">'
            f'</div><div class="legend">{charts.LEGEND}</div><div class="grid">{panels}</div></section>')


def _panel(report: RunReport, p: Panel, points: dict[str, Any]) -> str:
    sides = []
    for series, suffix, label in ((p.value, "v", "value"), (p.grad, "g", "gradient")):
        if series is None:
            sides.append(f'<div><h4>{label}</h4><div class="none">not probed</div></div>')
            continue
        svg, pts = charts.chart(series, chart_id=p.key + suffix)
        points[p.key + suffix] = tooltip_points(pts)
        hist = p.value_histogram if suffix == "v" else p.grad_histogram
        if hist is not None:
            svg += charts.histogram(hist, chart_id=p.key + suffix + "h")
        sides.append(f"<div><h4>{label} &middot; {len(series.calls)} hit(s)</h4>{svg}</div>")
    classes = "panel" + (" bad" if p.bad else "") + (" first" if p.key == report.first_nonfinite_panel else "")
    label = " ".join((p.module, p.node, p.target, p.source, p.source_text, p.probe))
    where = f' <span class="where">{escape(p.target)} &middot; {_link(report, p.source)}</span>'
    text = f" <code>{escape(p.source_text)}</code>" if p.source_text else ""
    return (f'<div class="{classes}" id="{p.key}" data-label="{escape(label)}"><h3>{escape(p.module or p.graph)} '
            f"&middot; {escape(p.node)}{where}{text}</h3><div class=\"pair\">{''.join(sides)}</div></div>")


def _events(report: RunReport) -> str:
    head = "<tr><th>kind</th><th>count</th><th>compile</th><th>where</th><th>function</th><th>line</th><th>reason</th></tr>"
    rows = "".join(_event_row(report, e) for e in report.events)
    table = f"<table>{head}{rows}</table>" if report.events else "<p>None.</p>"
    compiles = "".join(f"<tr><td>{escape(e.compile_id)}</td><td>{_link(report, e.where, e.file)}</td>"
                       f"<td>{escape(function_name(e.function))}</td></tr>" for e in report.compiles)
    listing = (f"<details><summary>{len(report.compiles)} compile(s)</summary><table><tr><th>compile</th>"
               f"<th>where</th><th>function</th></tr>{compiles}</table></details>" if report.compiles else "")
    return (f'<section id="events"><h2>Graph breaks and recompiles</h2><p>Collected at compile time from torch\'s '
            f"structured trace, each once with its count.</p>{table}{listing}</section>")


def _event_row(report: RunReport, e: CompileEvent) -> str:
    detail = f'<details><summary>details</summary><div class="detail">{escape(e.detail)}</div></details>' \
        if e.detail else ""
    detail += "".join(f'<div class="hint">hint: {escape(h)}</div>' for h in e.hints)
    if e.gb_id:
        page = f' <a href="{escape(e.doc_url)}">{escape(e.doc_url)}</a>' if e.doc_url else ""
        detail += f'<div class="hint">{escape(e.gb_id)}{page}</div>'
    return (f'<tr><td><span class="badge b-{e.kind}">{e.kind.replace("_", " ")}</span></td><td class="num">{e.count}</td>'
            f"<td>{escape(e.compile_id)}</td><td>{_link(report, e.where, e.file)}</td><td>{escape(function_name(e.function))}</td>"
            f"<td><code>{escape(e.source_text)}</code></td><td>{escape(e.reason)}{detail}</td></tr>")


def _graphs(report: RunReport) -> str:
    if not report.plans:
        return '<section id="graphs"><h2>Compiled graphs</h2><p>No graph instrumented by superstep was recorded.</p></section>'
    return ('<section id="graphs"><h2>Compiled graphs, with every probe and stop point</h2>' +
            "".join(_plan(report, p, i < 3) for i, p in enumerate(report.plans)) + "</section>")


def _plan(report: RunReport, plan: GraphPlan, open_: bool) -> str:
    sites = [s for r in plan.rows for s in r.sites]
    counts = ", ".join(f"{sum(s.kind == k for s in sites)} {k}" for k in ("value", "grad", "pause", "step")
                       if any(s.kind == k for s in sites))
    options = "; ".join(f"{k}={v}" for k, v in plan.options)
    head = "<tr><th>node</th><th>op</th><th>module</th><th>source</th><th>line</th><th>placed</th></tr>"
    shown = plan.rows if len(plan.rows) <= MAX_PLAN_ROWS else [r for r in plan.rows
                                                                if any(s.kind != "step" for s in r.sites)]
    rows = "".join(_plan_row(report, r) for r in shown)
    if len(shown) < len(plan.rows):
        rows += (f'<tr class="quiet"><td colspan="6">{len(plan.rows) - len(shown)} node(s) with no probe or pause '
                 "left out of this long graph</td></tr>")
    return (f"<details{' open' if open_ else ''}><summary><b>{escape(plan.graph)}</b> &middot; inner "
            f"{escape(plan.inner)} &middot; {len(plan.rows)} node(s): {escape(counts)} &middot; {escape(options)}"
            f"</summary><table>{head}{rows}</table></details>")


def _plan_row(report: RunReport, r: PlanRow) -> str:
    badges = "".join(f'<span class="badge b-{s.kind}" title="{escape(", ".join(s.actions))}">'
                     f"{escape(s.kind)}{': ' + escape(s.probe) if s.probe else ''}</span>" for s in r.sites)
    quiet = "" if any(s.kind != "step" for s in r.sites) else ' class="quiet"'
    return (f"<tr{quiet}><td>{escape(r.node)}</td><td>{escape(r.target)}</td><td>{escape(r.module)}</td>"
            f"<td>{_link(report, r.source, r.path)}</td><td><code>{escape(r.source_text)}</code></td><td>{badges}</td></tr>")


def _hits_section() -> str:
    return ('<section id="hits"><h2>Hits</h2><div class="controls">'
            '<input type="search" id="hit-filter" placeholder="filter: kind, graph, node, op, module, line">'
            '<select id="hit-kind"><option value="">values and gradients</option><option value="value">values</option>'
            '<option value="grad">gradients</option></select>'
            '<label><input type="checkbox" id="hit-bad"> NaN/Inf only</label>'
            '<button id="hit-prev">&lsaquo; prev</button><span id="hit-page"></span><button id="hit-next">next &rsaquo;</button>'
            '</div><table id="hits-table"><thead><tr></tr></thead><tbody></tbody></table></section>')


def _sources(report: RunReport) -> str:
    rows = "".join(f'<tr id="{line.key}"><td title="{escape(line.path)}">{escape(line.path or line.source)}'
                   f'{":" + escape(line.source.rpartition(":")[2]) if line.path else ""}</td>'
                   f"<td><code>{escape(line.text)}</code></td></tr>" for line in report.sources)
    body = f"<table>{rows}</table>" if rows else "<p>None.</p>"
    return f'<section id="sources"><h2>Source lines</h2>{body}</section>'
