"""`dynstep compare --html`: one self-contained page for a `Comparison`, in the report's style.

The first divergence with both runs' side, what did not align, and per-module curves of both runs
(mean and std of each module's value, A solid, B dashed; over steps, or over the module's nodes
when one step was recorded). Inline SVG and CSS only: no script, no request (a
Content-Security-Policy forbids any); every string from the recordings is escaped.

    text = render(cmp)          # also cmp.to_html("compare.html")
"""

from __future__ import annotations

import math
from html import escape

from ..crossrun.result import Comparison, Divergence, ModuleCurve, NodeRef
from .report_assets import CSS

W, H, LEFT, TOP, PLOT_W, PLOT_H = 520, 150, 60, 10, 440, 110
SERIES = (("a_mean", "#1a73e8", ""), ("b_mean", "#e37400", "5 3"), ("a_std", "#188038", ""),
          ("b_std", "#d93025", "5 3"))
EXTRA_CSS = ".curves{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:10px}"


def render(cmp: Comparison) -> str:
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    verdict = "ok" if cmp.ok else ""
    body = [f'<div class="banner {verdict}">{escape(cmp.summary())}</div>',
            f"<table class='kv'><tr><th>A</th><td>{escape(cmp.a)}</td></tr><tr><th>B</th><td>{escape(cmp.b)}</td></tr>"
            f"<tr><th>aligned</th><td>{escape(', '.join(f'{n} {m}' for m, n in cmp.aligned))}</td></tr>"
            f"<tr><th>hits compared</th><td>{cmp.compared}</td></tr></table>"]
    body += [f"<p class='legend'>note: {escape(n)}</p>" for n in cmp.notes]
    if cmp.first_divergence is not None:
        body.append(_divergence(cmp.first_divergence))
    body.append(_legend() + "<div class='curves'>" + "".join(_curve(c) for c in cmp.curves) + "</div>")
    for title, refs in (("Only in A", cmp.unmatched.a_only), ("Only in B", cmp.unmatched.b_only)):
        body.append(_refs(title, refs))
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{csp}"><title>dynstep compare</title>'
            f"<style>{CSS}{EXTRA_CSS}</style></head>\n<body><header><h1>dynstep compare</h1></header><main>\n"
            + "\n".join(body) + "\n</main></body></html>\n")


def _divergence(d: Divergence) -> str:
    rows = [("module", d.a.module, d.b.module), ("source", d.a.source, d.b.source),
            ("line", d.a.line_text, d.b.line_text), ("op", d.a.op, d.b.op), ("node", d.a.node, d.b.node),
            ("step", d.a.step, d.b.step), ("shape", list(d.a.shape), list(d.b.shape)), ("dtype", d.a.dtype, d.b.dtype)]
    rows += [(k, _num(d.a.stats[k]), _num(d.b.stats[k])) for k in ("mean", "std", "min", "max", "absmax", "nan", "inf")]
    cells = "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(str(x))}</td><td>{escape(str(y))}</td></tr>"
                    for k, x, y in rows)
    return (f"<h2 id='divergence'>First divergence: {escape(d.where)}</h2>"
            f"<p>matched {escape(d.match)}, compared {escape(d.compared)}; max |a-b| {_num(d.max_abs)}"
            f"{'; ' + escape(d.stat) + ' differs most' if d.stat else ''} (rtol {d.rtol:g}, atol {d.atol:g})</p>"
            f"<table><tr><th></th><th>A</th><th>B</th></tr>{cells}</table>")


def _legend() -> str:
    keys = "".join(f"<span class='key'><svg width='22' height='8'><line x1='0' y1='4' x2='22' y2='4' stroke='{c}' "
                   f"stroke-dasharray='{dash}' stroke-width='2'/></svg>{name.replace('_', ' ')}</span>"
                   for name, c, dash in SERIES)
    return f"<h2 id='curves'>Per-module curves</h2><div class='legend'>{keys}</div>"


def _curve(c: ModuleCurve) -> str:
    values = [v for p in c.points for v in (p.a_mean, p.a_std, p.b_mean, p.b_std) if math.isfinite(v)]
    if not values:
        return f"<div class='panel'><h3>{escape(c.module)}</h3><div class='none'>no finite values</div></div>"
    lo, hi = min(values), max(values)
    lo, hi = (lo - 1.0, hi + 1.0) if hi == lo else (lo, hi)
    n = len(c.points)

    def x(i: int) -> float:
        return LEFT + (PLOT_W * i / (n - 1) if n > 1 else PLOT_W / 2)

    def y(v: float) -> float:
        return TOP + PLOT_H * (hi - v) / (hi - lo)

    parts = [f"<rect class='frame' x='{LEFT}' y='{TOP}' width='{PLOT_W}' height='{PLOT_H}'/>",
             f"<text class='tick' x='2' y='{TOP + 8}'>{_num(hi)}</text>",
             f"<text class='tick' x='2' y='{TOP + PLOT_H}'>{_num(lo)}</text>",
             f"<text class='tick' x='{LEFT}' y='{H - 4}'>{escape(c.axis)}s: {escape(c.points[0].label)} .. "
             f"{escape(c.points[-1].label)}</text>"]
    for name, color, dash in SERIES:
        pts = [(x(i), y(getattr(p, name))) for i, p in enumerate(c.points) if math.isfinite(getattr(p, name))]
        if len(pts) == 1:
            parts.append(f"<circle cx='{pts[0][0]:.1f}' cy='{pts[0][1]:.1f}' r='2.5' fill='{color}'/>")
        elif pts:
            line = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
            parts.append(f"<polyline points='{line}' stroke='{color}' stroke-dasharray='{dash}'/>")
    svg = f"<svg class='chart' viewBox='0 0 {W} {H}' width='{W}' height='{H}'>{''.join(parts)}</svg>"
    return f"<div class='panel'><h3>{escape(c.module)} <span class='where'>per {escape(c.axis)}</span></h3>{svg}</div>"


def _refs(title: str, refs: tuple[NodeRef, ...]) -> str:
    if not refs:
        return f"<h2>{title}</h2><p class='legend'>none</p>"
    rows = "".join(f"<tr><td>{escape(r.kind)}</td><td>{escape(r.node)}</td><td>{escape(r.op)}</td>"
                   f"<td>{escape(r.module or '-')}</td><td>{escape(r.source or '-')}</td>"
                   f"<td><code>{escape(r.line_text)}</code></td><td class='num'>{r.hits}</td></tr>" for r in refs)
    return (f"<h2>{title}: {len(refs)} node(s)</h2><table><tr><th>kind</th><th>node</th><th>op</th><th>module</th>"
            f"<th>source</th><th>line</th><th>hits</th></tr>{rows}</table>")


def _num(v: float) -> str:
    return str(v) if isinstance(v, float) and not math.isfinite(v) else f"{v:.4g}"
