"""Charts of a report as inline SVG, drawn here in Python: no chart library in the page.

One chart per series (a probed value, or its gradient) over its calls: min, max, mean with a
mean ± std band, absmax dashed, NaN/Inf counts as red bars in a strip below, and a red line at
the first non-finite call. Calls with no finite stats leave a gap. Long series are drawn reduced
to at most 400 buckets (`dynstep.report.page_data.reduced`), so a page stays light however
long the run was.

    svg, points = chart(series, chart_id="p3v")    # points: what the page's tooltip shows
    svg = histogram(panel.value_histogram, chart_id="p3vh")   # one hit's distribution, as bars
"""

from __future__ import annotations

import html
import math

from ..report.histogram import Histogram
from ..report.model import Series
from ..report.page_data import finite, reduced

W, H = 460, 150
LEFT, RIGHT, TOP, PLOT_H, STRIP_H = 56, 8, 8, 100, 12


def chart(series: Series, *, chart_id: str) -> tuple[str, dict[str, list]]:
    """The SVG of one series, and its (reduced) points for the page's tooltip."""
    pts = reduced(series)
    n = len(pts["call"])
    lo, hi = _range(pts)
    xs = [LEFT + (i + 0.5) * (W - LEFT - RIGHT) / n for i in range(n)]

    def y(v: float) -> float:
        return TOP + (hi - v) * PLOT_H / (hi - lo)

    parts = [f'<svg class="chart" viewBox="0 0 {W} {H}" width="100%" role="img" data-chart="{chart_id}" '
             f'data-left="{LEFT}" data-right="{W - RIGHT}" data-n="{n}">',
             f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{PLOT_H}"/>']
    parts += _axes(pts, lo, hi, y)
    parts.append(_band(xs, pts, y))
    for key in ("absmax", "min", "max", "mean"):
        parts += _lines(key, xs, pts[key], y)
    parts += _strip(xs, pts)
    first = next((i for i in range(n) if pts["nan"][i] or pts["inf"][i]), None)
    if first is not None:
        parts.append(f'<line class="firstbad" x1="{xs[first]:.1f}" x2="{xs[first]:.1f}" y1="{TOP}" '
                     f'y2="{TOP + PLOT_H + STRIP_H + 4}"><title>first NaN/Inf: call {pts["call"][first]}</title></line>')
    parts.append(f'<line class="cursor" x1="0" x2="0" y1="{TOP}" y2="{TOP + PLOT_H}" visibility="hidden"/></svg>')
    return "".join(parts), pts


def _range(pts: dict[str, list]) -> tuple[float, float]:
    band = [m + sign * d for m, d in zip(pts["mean"], pts["std"]) for sign in (-1, 1)]
    values = finite(pts["min"] + pts["max"] + pts["absmax"] + band)
    if not values:
        return -1.0, 1.0
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        pad = abs(hi) * 0.1 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.05
    return lo - pad, hi + pad


def _axes(pts: dict[str, list], lo: float, hi: float, y) -> list[str]:
    bottom = TOP + PLOT_H
    out = [f'<text class="tick" x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end">{_num(hi)}</text>',
           f'<text class="tick" x="{LEFT - 4}" y="{bottom}" text-anchor="end">{_num(lo)}</text>']
    if lo < 0 < hi:
        out.append(f'<line class="zero" x1="{LEFT}" x2="{W - RIGHT}" y1="{y(0):.1f}" y2="{y(0):.1f}"/>')
    calls = pts["call"]
    if all(a < b for a, b in zip(calls, calls[1:])):
        first, last = f"call {calls[0]}", f"call {calls[-1]}"
    else:   # recompiled copies of the graph count their calls from 0 again: number the hits instead
        first, last = "hit 1", f"hit {len(calls)}"
    out.append(f'<text class="tick" x="{LEFT}" y="{H - 2}">{first}</text>')
    if len(calls) > 1:
        out.append(f'<text class="tick" x="{W - RIGHT}" y="{H - 2}" text-anchor="end">{last}</text>')
    out.append(f'<text class="tick" x="{LEFT - 4}" y="{bottom + STRIP_H}" text-anchor="end">nan/inf</text>')
    return out


def _segments(xs: list[float], values: list[float], y) -> list[list[tuple[float, float]]]:
    segments: list[list[tuple[float, float]]] = [[]]
    for x, v in zip(xs, values):
        if math.isfinite(v):
            segments[-1].append((x, y(v)))
        elif segments[-1]:
            segments.append([])
    return [s for s in segments if s]


def _lines(key: str, xs: list[float], values: list[float], y) -> list[str]:
    out = []
    for seg in _segments(xs, values, y):
        if len(seg) == 1 or len(xs) <= 40:
            out += [f'<circle class="pt {key}" cx="{px:.1f}" cy="{py:.1f}" r="2"/>' for px, py in seg]
        if len(seg) > 1:
            points = " ".join(f"{px:.1f},{py:.1f}" for px, py in seg)
            out.append(f'<polyline class="{key}" points="{points}"><title>{key}</title></polyline>')
    return out


def _band(xs: list[float], pts: dict[str, list], y) -> str:
    upper = [m + s if math.isfinite(m) and math.isfinite(s) else math.nan for m, s in zip(pts["mean"], pts["std"])]
    lower = [m - s if math.isfinite(m) and math.isfinite(s) else math.nan for m, s in zip(pts["mean"], pts["std"])]
    polys = []
    for top, bottom in zip(_segments(xs, upper, y), _segments(xs, lower, y)):
        ring = top + list(reversed(bottom))
        polys.append('<polygon class="band" points="' + " ".join(f"{px:.1f},{py:.1f}" for px, py in ring) +
                     '"><title>mean ± std</title></polygon>')
    return "".join(polys)


def _strip(xs: list[float], pts: dict[str, list]) -> list[str]:
    top = TOP + PLOT_H + 3
    width = max(1.5, (W - LEFT - RIGHT) / len(xs) * 0.8)
    out = [f'<rect class="strip" x="{LEFT}" y="{top}" width="{W - LEFT - RIGHT}" height="{STRIP_H}"/>']
    for x, call, nan, inf in zip(xs, pts["call"], pts["nan"], pts["inf"]):
        if nan or inf:
            out.append(f'<rect class="badbar" x="{x - width / 2:.1f}" y="{top}" width="{width:.1f}" '
                       f'height="{STRIP_H}"><title>call {call}: nan {nan}, inf {inf}</title></rect>')
    return out


HIST_H, HIST_PLOT = 96, 66


def histogram(h: Histogram, *, chart_id: str) -> str:
    """Bars of one hit's finite elements between their min and max; NaN/Inf counts said beside."""
    width = W - LEFT - RIGHT
    top = max(h.counts, default=0) or 1
    bad = ", ".join(f"{n} {name}" for n, name in ((h.nan, "NaN"), (h.posinf, "+Inf"), (h.neginf, "-Inf")) if n)
    caption = f"distribution at call {h.call}: {h.finite:,} finite of {h.numel:,}" + (f"; {bad}" if bad else "")
    parts = [f'<svg class="hist" viewBox="0 0 {W} {HIST_H}" width="100%" role="img" data-chart="{chart_id}">',
             f'<text class="tick" x="{LEFT}" y="{TOP + 2}">{html.escape(caption)}</text>']
    if h.counts:
        bar = width / len(h.counts)
        y0 = TOP + 10 + HIST_PLOT
        for i, count in enumerate(h.counts):
            tall = HIST_PLOT * count / top
            parts.append(f'<rect class="bar" x="{LEFT + i * bar + 0.5:.1f}" y="{y0 - tall:.1f}" width="{max(bar - 1, 0.5):.1f}" '
                         f'height="{tall:.1f}"><title>[{_num(h.edges[i])}, {_num(h.edges[i + 1])}): {count}</title></rect>')
        parts += [f'<line class="zero" x1="{LEFT}" x2="{W - RIGHT}" y1="{y0}" y2="{y0}"/>',
                  f'<text class="tick" x="{LEFT - 4}" y="{TOP + 18}" text-anchor="end">{top}</text>',
                  f'<text class="tick" x="{LEFT}" y="{HIST_H - 2}">{_num(h.edges[0])}</text>',
                  f'<text class="tick" x="{W - RIGHT}" y="{HIST_H - 2}" text-anchor="end">{_num(h.edges[-1])}</text>']
    else:
        parts.append(f'<text class="tick bad" x="{LEFT}" y="{TOP + 40}">no finite element</text>')
    if bad:
        parts.append(f'<text class="tick bad" x="{W - RIGHT}" y="{TOP + 2}" text-anchor="end">{html.escape(bad)}</text>')
    return "".join(parts) + "</svg>"


def _num(v: float) -> str:
    return html.escape(f"{v:.3g}")


LEGEND = ("".join(f'<span class="key"><svg width="18" height="8"><line class="{k}" x1="0" x2="18" y1="4" y2="4"/>'
                  f'</svg>{k}</span>' for k in ("min", "mean", "max", "absmax")) +
          '<span class="key"><svg width="18" height="8"><rect class="band" width="18" height="8"/></svg>mean ± std</span>'
          '<span class="key"><svg width="8" height="8"><rect class="badbar" width="8" height="8"/></svg>NaN/Inf count</span>'
          '<span class="key"><svg width="8" height="10"><line class="firstbad" x1="4" x2="4" y1="0" y2="10"/></svg>'
          'first non-finite</span>')
