"""A self-contained HTML page for a DiffReport: inline CSS, no script, no network needed.

    html_text = render(report)        # also report.to_html("diff.html")
"""

from __future__ import annotations

import html
import math

from ..eagerdiff.report import DiffReport, GraphDiff, NodeDiff

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin-top:2em}
.verdict{padding:.6em 1em;border-radius:6px;display:inline-block}
.ok{background:#e6f4ea;color:#137333} .bad{background:#fce8e6;color:#a50e0e}
table{border-collapse:collapse;margin-top:.5em} th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left}
th{background:#f1f3f4} tr.div td{color:#a50e0e} tr.first td{background:#fce8e6;font-weight:bold}
code{background:#f1f3f4;padding:0 3px;border-radius:3px} .note{color:#8a6d00}
"""


def _f(v: float) -> str:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    return f"{v:.3g}"


def _row(d: NodeDiff, first: str | None) -> str:
    cls = "first" if d.node == first and d.kind != "grad" else ("div" if d.diverged else "")
    verdict = ("DIVERGES" if d.diverged else "ok") + (" (own)" if d.own else "") + \
        (f" ({d.verdict})" if d.diverged and d.verdict and d.verdict != "compiled worse" else "") + \
        (f" [{d.kind}]" if d.kind != "value" else "")
    plain = [str(d.order), d.node, d.target, d.module or "-"]
    rest = ["\u00d7".join(map(str, d.shape)), d.dtype, _f(d.error), _f(d.ref_error), _f(d.ratio),
            _f(d.max_abs), _f(d.max_rel), _f(d.cosine), verdict]
    source = f"{html.escape(d.source or '-')} <code>{html.escape(d.source_text)}</code>"
    cells = [html.escape(c) for c in plain] + [source] + [html.escape(c) for c in rest]
    return f"<tr class='{cls}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _graph(g: GraphDiff) -> str:
    first = g.first_divergence.node if g.first_divergence else None
    head = ("#", "node", "op", "module", "source", "shape", "dtype", "error vs fp64", "eager error",
            "ratio", "max abs", "max rel", "cosine", "verdict")
    rows = "".join(_row(d, first) for d in (*g.nodes, *g.grads))
    parts = [f"<h2>{html.escape(g.graph)} &middot; call {g.call} &middot; backend {html.escape(g.backend)} "
             f"&middot; {g.compiles} compile(s), {g.seconds:.1f}s</h2>"]
    if g.first_divergence is not None:
        parts.append(f"<p><b>First divergence:</b> {html.escape(g.first_divergence.where)} "
                     f"<code>{html.escape(g.first_divergence.source_text)}</code></p>")
    if g.first_divergence is not None and g.first_divergence.verdict:
        parts.append(f"<p><b>Verdict against float64:</b> {html.escape(g.first_divergence.verdict)}</p>")
    if g.root_cause is not None:
        tried = "".join(f"<li>{html.escape(a.name)}{' &mdash; <b>fixed</b>' if a.fixed else ''}</li>"
                        for a in g.root_cause.ablations)
        parts.append(f"<p><b>Root cause:</b> {html.escape(g.root_cause.sentence)} "
                     f"({g.root_cause.compiles} compile(s) of a {g.root_cause.subgraph_nodes}-node subgraph)</p>"
                     f"<details><summary>ablations tried</summary><ul>{tried}</ul></details>")
    if g.grad_divergence is not None:
        parts.append(f"<p><b>First divergent gradient belongs to:</b> {html.escape(g.grad_divergence.where)}</p>")
    for o in (g.nan_eager, g.nan_compiled):
        if o is not None:
            parts.append(f"<p><b>First non-finite ({o.run}):</b> {html.escape(o.node)} ({html.escape(o.target)}) "
                         f"in {html.escape(o.module or '-')} at {html.escape(o.source)} "
                         f"<code>{html.escape(o.source_text)}</code> nan={o.nan} inf={o.inf}</p>")
    if g.ladder:
        rungs = " &rarr; ".join(f"{html.escape(s.backend)}: {'DIVERGES' if s.diverged else 'ok'}" for s in g.ladder)
        parts.append(f"<p><b>Backends ladder:</b> eager: ok &rarr; {rungs}</p>")
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in g.notes]
    parts.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{rows}</table>")
    return "\n".join(parts)


def render(report: DiffReport) -> str:
    verdict = "ok" if report.ok else "bad"
    body = "\n".join(_graph(g) for g in report.graphs)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>dynstep diff</title>"
            f"<style>{_CSS}</style></head><body><h1>dynstep diff &middot; backend {html.escape(report.backend)}</h1>"
            f"<p class='verdict {verdict}'>{html.escape(report.summary())}</p>\n{body}</body></html>\n")
