"""The lead-up section of `dynstep report` for a flight recorder's dump: per-module curves over the last
steps with the trigger's step marked, the trigger's node highlighted, gradients beside values.

Inline SVG like the rest of the page (no script needed, a `<title>` on every point for hovering); every
string from the recording is escaped.

    html = section(report)        # "" for a recording that is not a dump
"""

from __future__ import annotations

import math
from html import escape

from ..report.leadup import Curve, LeadUp, ModuleLeadUp
from ..report.model import RunReport

W, H = 460, 118
LEFT, RIGHT, TOP, PLOT_H, STRIP_H = 56, 8, 8, 78, 10

CSS = """
#leadup .lgrid{display:grid;grid-template-columns:repeat(auto-fill,minmax(980px,1fr));gap:8px}
#leadup .lrow{border:1px solid var(--line);border-radius:6px;padding:4px 10px}
#leadup .lrow.bad{border-color:#d93025;background:#fffafa} #leadup .lrow.first{box-shadow:0 0 0 3px #f28b82}
#leadup .lrow h3{font-size:13px;margin:2px 0;font-weight:600} #leadup .lcharts{display:flex;gap:16px;flex-wrap:wrap}
#leadup .lcharts>div{flex:0 1 460px} #leadup h4{margin:0;font-size:12px;font-weight:normal;color:var(--muted)}
svg .lmax{stroke:#5f6368} svg circle.lmax{fill:#5f6368}
svg .trigger{stroke:#d93025;stroke-width:1.5;stroke-dasharray:4 2}
svg .watch{stroke:#8430ce} svg circle.watch{fill:#8430ce} svg .steplabel{font-size:10px;fill:#d93025}
"""


def section(report: RunReport) -> str:
    lead = report.leadup
    if lead is None:
        return ""
    t = lead.trigger
    charts = []
    if lead.node is not None:
        label = f"the trigger's node {t.node} ({'gradient' if t.phase == 'backward' else 'value'})"
        charts.append(f"<div><h4>{escape(label)}</h4>{chart(lead.node, t.step, 'lnode')}</div>")
    for i, w in enumerate(lead.watched):
        svg = watch_chart(w.steps, w.values, lead.steps, t.step, f"lw{i}")
        charts.append(f"<div><h4>watched: {escape(w.name)}</h4>{svg}</div>")
    rows = "\n".join(_row(lead, m) for m in lead.modules)
    more = (f"<p>{lead.left_out} more module(s) are not drawn (the hits table has every value).</p>"
            if lead.left_out else "")
    rule = "optimizer steps" if lead.step_rule == "optimizer" else "top-level compiled calls"
    return (f'<style>{CSS}</style><section id="leadup"><h2>Lead-up: {escape(t.kind)} at step {t.step}</h2>'
            f'<div class="banner" id="trigger">{_trigger_text(report)}</div>'
            f"<p>Steps {lead.steps[0]} to {lead.steps[-1]} (a step: {rule}). Per module: the largest |value| of "
            "its values (grey), the mean &plusmn; std of its last value (green), NaN/Inf counts (red bars); the "
            f"trigger's step is the dashed red line. Left: values, right: the gradients flowing into them.</p>"
            f'<div class="lcharts">{"".join(charts)}</div><div class="lgrid">{rows}</div>{more}</section>')


def _trigger_text(report: RunReport) -> str:
    t = report.leadup.trigger if report.leadup else None
    assert t is not None
    parts = [f"<b>Trigger:</b> {escape(t.kind)} at step {t.step}"]
    if t.node:
        link = report.source_key(t.source)
        source = f'<a href="#{link}">{escape(t.source)}</a>' if link else escape(t.source or "?")
        parts.append(f" &mdash; {'gradient flowing into' if t.phase == 'backward' else 'value of'} node "
                     f"<code>{escape(t.node)}</code> ({escape(t.target)}) in <code>{escape(t.module or '-')}</code> "
                     f"at {source}" + (f" <code>{escape(t.source_text)}</code>" if t.source_text else "")
                     + f", {escape(t.phase)}, graph {escape(t.graph)}")
    if t.reason:
        parts.append(f" &middot; {escape(t.reason)}")
    return "".join(parts)


def _row(lead: LeadUp, m: ModuleLeadUp) -> str:
    bad = any(c is not None and c.first_bad is not None for c in (m.value, m.grad))
    classes = "lrow" + (" bad" if bad else "") + (" first" if m.first else "")
    sides = []
    for curve, suffix, label in ((m.value, "v", "values"), (m.grad, "g", "gradients")):
        body = (chart(curve, lead.trigger.step, m.key + suffix) if curve is not None
                else '<div class="none">not probed</div>')
        sides.append(f"<div><h4>{label}</h4>{body}</div>")
    return (f'<div class="{classes}" id="{m.key}" data-module="{escape(m.module)}"><h3>{escape(m.module)} '
            f'<span class="where">&middot; {m.values} value(s)</span></h3>'
            f'<div class="pair">{"".join(sides)}</div></div>')


def chart(curve: Curve, trigger_step: int, chart_id: str) -> str:
    finite = [v for v in curve.absmax + tuple(m + k * s for m, s in zip(curve.mean, curve.std) for k in (-1, 1))
              if math.isfinite(v)]
    lo, hi = _range(finite)
    xs = _xs(len(curve.steps))
    y = lambda v: TOP + (hi - v) * PLOT_H / (hi - lo)  # noqa: E731
    parts = [_frame(chart_id, curve.steps, lo, hi), _band(curve, xs, y)]
    parts += _line("lmax", xs, curve.absmax, curve.steps, y) + _line("mean", xs, curve.mean, curve.steps, y)
    parts += _strip(xs, curve)
    parts.append(_marker(curve.steps, xs, trigger_step, "trigger", f"trigger: step {trigger_step}"))
    if curve.first_bad is not None:
        parts.append(_marker(curve.steps, xs, curve.first_bad, "firstbad", f"first NaN/Inf: step {curve.first_bad}"))
    return "".join(parts) + "</svg>"


def watch_chart(steps: tuple[int, ...], values: tuple[float, ...], window: tuple[int, ...], trigger_step: int,
                chart_id: str) -> str:
    by_step = dict(zip(steps, values))
    series = tuple(by_step.get(s, math.nan) for s in window)
    lo, hi = _range([v for v in series if math.isfinite(v)])
    xs = _xs(len(window))
    y = lambda v: TOP + (hi - v) * PLOT_H / (hi - lo)  # noqa: E731
    parts = [_frame(chart_id, window, lo, hi)] + _line("watch", xs, series, window, y)
    bad = tuple(int(s in by_step and not math.isfinite(by_step[s])) for s in window)   # watched, not finite
    parts += _strip(xs, Curve(window, series, series, series, bad))
    parts.append(_marker(window, xs, trigger_step, "trigger", f"trigger: step {trigger_step}"))
    return "".join(parts) + "</svg>"


def _xs(n: int) -> list[float]:
    return [LEFT + (i + 0.5) * (W - LEFT - RIGHT) / max(n, 1) for i in range(n)]


def _range(values: list[float]) -> tuple[float, float]:
    if not values:
        return -1.0, 1.0
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.1 or 1.0
    return lo - pad, hi + pad


def _frame(chart_id: str, steps: tuple[int, ...], lo: float, hi: float) -> str:
    bottom = TOP + PLOT_H
    return (f'<svg class="chart" viewBox="0 0 {W} {H}" width="100%" role="img" data-chart="{chart_id}">'
            f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{PLOT_H}"/>'
            f'<text class="tick" x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end">{_num(hi)}</text>'
            f'<text class="tick" x="{LEFT - 4}" y="{bottom}" text-anchor="end">{_num(lo)}</text>'
            f'<text class="tick" x="{LEFT}" y="{H - 2}">step {steps[0] if steps else "-"}</text>'
            f'<text class="tick" x="{W - RIGHT}" y="{H - 2}" text-anchor="end">'
            f'step {steps[-1] if steps else "-"}</text>')


def _line(cls: str, xs: list[float], values: tuple[float, ...], steps: tuple[int, ...], y) -> list[str]:
    out, run = [], []
    for x, v, s in list(zip(xs, values, steps)) + [(0.0, math.nan, -1)]:
        if math.isfinite(v):
            run.append(f"{x:.1f},{y(v):.1f}")
            out.append(f'<circle class="pt {cls}" cx="{x:.1f}" cy="{y(v):.1f}" r="1.8"><title>step {s}: {cls} '
                       f"{v:.4g}</title></circle>")
        elif run:
            if len(run) > 1:
                out.append(f'<polyline class="{cls}" points="{" ".join(run)}"/>')
            run = []
    return out


def _band(curve: Curve, xs: list[float], y) -> str:
    pts = [(x, m, s) for x, m, s in zip(xs, curve.mean, curve.std) if math.isfinite(m) and math.isfinite(s)]
    if len(pts) < 2:
        return ""
    ring = [f"{x:.1f},{y(m + s):.1f}" for x, m, s in pts] + [f"{x:.1f},{y(m - s):.1f}" for x, m, s in reversed(pts)]
    return f'<polygon class="band" points="{" ".join(ring)}"/>'


def _strip(xs: list[float], curve: Curve) -> list[str]:
    top = TOP + PLOT_H + 3
    width = max(1.5, (W - LEFT - RIGHT) / max(len(xs), 1) * 0.8)
    out = [f'<rect class="strip" x="{LEFT}" y="{top}" width="{W - LEFT - RIGHT}" height="{STRIP_H}"/>']
    for x, step, bad in zip(xs, curve.steps, curve.nonfinite):
        if bad:
            out.append(f'<rect class="badbar" x="{x - width / 2:.1f}" y="{top}" width="{width:.1f}" height="{STRIP_H}">'
                       f"<title>step {step}: {bad} NaN/Inf</title></rect>")
    return out


def _marker(steps: tuple[int, ...], xs: list[float], step: int, cls: str, title: str) -> str:
    if step not in steps:
        return ""
    x = xs[steps.index(step)]
    return (f'<line class="{cls}" data-step="{step}" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" '
            f'y2="{TOP + PLOT_H + STRIP_H + 3}">'
            f"<title>{escape(title)}</title></line>")


def _num(v: float) -> str:
    return escape(f"{v:.3g}")
