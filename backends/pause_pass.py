"""The pause pass: insert `dynstep::pause` stop points into a Dynamo graph.

A graph gets stop points only when it has a pause selector that matches in it, or when stepping
mode is requested (``step=True``); every other graph is left exactly as it was, so it pays
nothing. In a graph that gets them, every tensor-valued node is followed by a pause op:

- nodes a pause selector picks get a site with ``actions=("pause",)``: the stepper stops there;
- every other node gets a *step point* (``actions=("step",)``): a no-op unless the stepper is
  stepping (``s``) or a breakpoint added at run time (``break SEL``) matches it.

The graph's listing goes to the stepper's run-time registry (`dynstep.step.graphs.GRAPHS`).

    sites = insert_pauses(gm, PausePlan.build(opts, "forward[0/0]"))
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
import warnings

import torch
import torch.fx

from dynstep import _compat
from dynstep.core.options import Options
from dynstep.core.records import GraphRow
from dynstep.core.stop import StepConfig
from dynstep.core.sites import SITES, Site, UserLine
from dynstep.graph import info as gi
from dynstep.graph import selectors as sel
from dynstep.ops import schema as ops
from dynstep.step import registration as step_registration
from dynstep.step.graphs import GRAPHS, GraphEntry
from dynstep.step.stepper import STEPPER

_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)")
_PER_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("dynstep_commands_per_call", default=False)


@dataclasses.dataclass(frozen=True)
class PausePlan:
    selectors: tuple[sel.Selector, ...]
    graph_id: str
    step: bool

    @classmethod
    def build(cls, opts: Options, graph_id: str, *, everywhere: bool = False) -> "PausePlan":
        return cls(selectors=tuple(sel.parse_all(opts.pause)), graph_id=graph_id, step=opts.step or everywhere)


def stop_points_everywhere() -> bool:
    """A front end asked for stop points in every graph (an editor: its breakpoints come later,
    `STEPPER.stop_points`). Read once per compile (superstep's CompilePlan)."""
    return bool(STEPPER.stop_points)


def wants_pauses(opts: Options, everywhere: bool) -> bool:
    """Pause selectors, step=True, or stop points everywhere."""
    return bool(opts.pause or opts.step or everywhere)


@contextlib.contextmanager
def commands_of(per_call: bool):
    """While superstep compiles a graph for a torch.compile call whose options give `commands`: each
    such call runs the script from the start (Stepper.configure)."""
    token = _PER_CALL.set(per_call)
    try:
        yield
    finally:
        _PER_CALL.reset(token)


def configure_stepper(opts: Options) -> None:
    """Tell the stepper who answers stops (pauses, steps, nan="stop") for graphs compiled with opts."""
    step_registration.ensure()
    STEPPER.configure(StepConfig(opts.frontend, opts.commands, opts.step, per_call=_PER_CALL.get()))
    _coordinate(opts)


def _coordinate(opts: Options) -> None:
    """In a distributed job every rank meets the others at each stop point (dynstep.jobs): the
    coordinator goes into the stepper's slot; which rank this is, is found at the first stop point."""
    from dynstep.jobs.coordinator import for_job

    if STEPPER.coordinator is None:
        STEPPER.use_coordinator(for_job(opts.ranks))
    elif opts.ranks is not None:
        STEPPER.coordinator.set_ranks(opts.ranks)


def insert_pauses(gm: torch.fx.GraphModule, plan: PausePlan) -> list[Site]:
    """Insert stop points when the plan asks for them; returns the new sites (empty: untouched)."""
    graph = gm.graph
    aten = [s for s in plan.selectors if s.aten_level]
    if aten:
        warnings.warn(f"dynstep: pause selectors {[s.text for s in aten]} name aten ops; pauses are placed "
                      "in the Dynamo graph, use torch-level names (op:mm, op:layer_norm)", UserWarning,
                      stacklevel=2)
    chosen = [s for s in plan.selectors if not s.aten_level]
    matches = sel.select(graph, chosen, aten_level=False)
    _warn_unmatched(graph, chosen, matches, plan.graph_id)
    if not matches and not plan.step:
        return []
    step_registration.ensure()
    selected: dict[torch.fx.Node, str] = {}
    named: dict[torch.fx.Node, tuple[str, ...]] = {}
    for m in matches:
        for node in gi.tensor_nodes(m.node):
            selected.setdefault(node, m.selector.text)
            named[node] = max(named.get(node, ()), m.modules, key=len)   # one stop, named by every module
    values = [n for n in graph.nodes if gi.is_value_node(n) and isinstance(gi.example_value(n), torch.Tensor)]
    last_of_line = _last_of_line(values)
    sites: list[Site] = []
    rows: dict[str, int] = {}
    for node in values:
        if not node.users and node not in selected:
            continue
        site = _add_site(node, plan, selected.get(node), last_of_line, named.get(node, ()))
        inputs = [a for a in node.all_input_nodes if isinstance(gi.example_value(a), torch.Tensor)]
        with graph.inserting_after(node):
            p = graph.call_function(ops.pause, (node, site.id, inputs))
        p.meta.update({k: node.meta[k] for k in ("stack_trace", "nn_module_stack", "seq_nr") if k in node.meta})
        rows[node.name] = site.id
        sites.append(site)
    GRAPHS.put(GraphEntry(plan.graph_id, _rows(values, rows), graph))
    graph.lint()
    gm.recompile()
    return sites


def copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of a Dynamo graph module sharing node metadata (fake values), before passes edit it."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    out_node = graph.output(out)
    out_node.meta = dict(gm.graph.output_node().meta)
    copy = torch.fx.GraphModule(gm, graph)
    copy.meta = dict(getattr(gm, "meta", {}))
    return copy


def _warn_unmatched(graph: torch.fx.Graph, chosen: list, matches: list, graph_id: str) -> None:
    for where, s in sel.unmatched(graph, chosen, matches, aten_level=False):
        warnings.warn(f"dynstep: in graph {graph_id} (no stop points there): "
                      f"{sel.unmatched_message(where, s, 'pause selector')}", UserWarning, stacklevel=3)


def _add_site(node: torch.fx.Node, plan: PausePlan, selector: str | None, last_of_line: set,
              modules: tuple[str, ...] = ()) -> Site:
    src, text = gi.source(node)
    user_name = ""
    match = _ASSIGN.match(text)
    if match and node in last_of_line:
        user_name = match.group(1)
    inputs = [a for a in node.all_input_nodes if isinstance(gi.example_value(a), torch.Tensor)]
    return SITES.add(kind="pause", probe=selector or "", node=node.name, target=gi.op_name(node),
                     module=gi.module_path(node), source=src, source_text=text, graph=plan.graph_id,
                     actions=("pause",) if selector else ("step",), capacity=1,
                     inputs=tuple(a.name for a in inputs),
                     input_names=tuple(_compat.input_local_name(a) if a.op == "placeholder" else "" for a in inputs),
                     user_name=user_name, modules=modules,
                     frames=tuple(UserLine(f.file, f.line) for f in gi.user_frames(node)))


def _last_of_line(values: list[torch.fx.Node]) -> set:
    """Nodes that end a run of nodes from the same source line (the value the line assigns)."""
    out = set()
    for node, after in zip(values, values[1:] + [None]):
        here = gi.user_frames(node)
        there = gi.user_frames(after) if after is not None else ()
        if here and (not there or there[-1] != here[-1] or gi.module_stack(after) != gi.module_stack(node)):
            out.add(node)
    return out


def _rows(values: list[torch.fx.Node], sites: dict[str, int]) -> tuple[GraphRow, ...]:
    return tuple(GraphRow(node=n.name, target=gi.op_name(n), module=gi.module_path(n), source=gi.source(n)[0],
                          site=sites.get(n.name)) for n in values)


