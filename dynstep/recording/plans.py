"""What superstep placed in a graph, as a `GraphPlan`: each node as the user wrote it (op, module,
user line) with its probes and stop points. Built by the backend once its passes have run; it goes
to the compile log (and so into recordings and reports) and, as JSON, into the structured trace.

    mark = sites_so_far();  ...the passes run...;  plan = plan_of(gm, "forward[0/0]", "0/0", opts, after=mark)
    source_map(plan)   -> {"node": {"module": ..., "source": ..., "text": ...}, ...}
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch.fx

from ..core.options import Options
from ..core.sites import SITES, Site
from ..graph import info as gi
from .facts import GraphPlan, PlanRow, PlanSite, to_json

_ELEMENT = re.compile(r"\[\d+\]$")


def sites_so_far() -> int:
    """A mark for `plan_of(after=...)`: site ids count up from 1 and are never reused."""
    return len(SITES.all())


def plan_of(gm: torch.fx.GraphModule, graph_id: str, compile_id: str, opts: Options, *, after: int) -> GraphPlan:
    """The plan of the sites placed since the mark `after` (graph ids repeat after torch.compiler.reset())."""
    by_node: dict[str, list[Site]] = {}
    for site in SITES.all():
        if site.graph == graph_id and site.id > after:
            by_node.setdefault(_ELEMENT.sub("", site.node), []).append(site)
    rows = []
    for node in gm.graph.nodes:
        if not gi.is_value_node(node):
            continue
        rows.append(_row(node, by_node.pop(node.name, [])))
    for name, sites in by_node.items():   # placed in AOTAutograd's graphs (op:aten.*): no Dynamo node
        s = sites[0]
        rows.append(PlanRow(node=name, target=s.target, module=s.module, source=s.source,
                            path=s.frames[-1].file if s.frames else "", source_text=s.source_text,
                            sites=tuple(_site(x) for x in sites)))
    return GraphPlan(graph=graph_id, compile_id=compile_id, inner=opts.inner_name, options=_options(opts),
                     rows=tuple(rows))


def _row(node: torch.fx.Node, sites: list[Site]) -> PlanRow:
    frames = gi.user_frames(node)
    text = frames[-1].code if frames else ""
    return PlanRow(node=node.name, target=gi.op_name(node), module=gi.module_path(node),
                   source=frames[-1].location if frames else "", path=frames[-1].file if frames else "",
                   source_text=text, sites=tuple(_site(s) for s in sites))


def _site(site: Site) -> PlanSite:
    kind = site.kind
    if kind == "pause" and site.actions == ("step",):
        kind = "step"
    return PlanSite(site=site.id, kind=kind, probe=site.probe if kind != "step" else "", actions=site.actions)


def _options(opts: Options) -> tuple[tuple[str, str], ...]:
    default = Options()
    out = []
    for f in dataclasses.fields(Options):
        value = getattr(opts, f.name)
        if f.name in ("inner", "commands") or value == getattr(default, f.name):
            continue
        out.append((f.name, ", ".join(map(str, value)) if isinstance(value, tuple) else str(value)))
    return tuple(out)


def plan_json(plan: GraphPlan) -> dict[str, Any]:
    """The plan as the structured trace's ``dynstep_plan`` artifact: sites only, by node."""
    return {"graph": plan.graph, "compile_id": plan.compile_id, "inner": plan.inner,
            "options": dict(plan.options),
            "sites": [dict(to_json(s), node=r.node, op=r.target, module=r.module, source=r.source)
                      for r in plan.rows for s in r.sites if s.kind != "step"],
            "step_points": sum(1 for r in plan.rows for s in r.sites if s.kind == "step")}


def source_map(plan: GraphPlan) -> dict[str, dict[str, str]]:
    """node -> where the user wrote it (the ``dynstep_source_map`` artifact)."""
    return {r.node: {"op": r.target, "module": r.module, "source": r.source, "path": r.path, "text": r.source_text}
            for r in plan.rows}
