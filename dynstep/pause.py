"""The pause pass: insert `dynstep::pause` stop points into a Dynamo graph.

A graph gets stop points only when it has a pause selector that matches in it, or when stepping
mode is requested (``step=True``); every other graph is left exactly as it was, so it pays
nothing. In a graph that gets them, every tensor-valued node is followed by a pause op:

- nodes a pause selector picks get a site with ``actions=("pause",)``: the stepper stops there;
- every other node gets a *step point* (``actions=("step",)``): a no-op unless the stepper is
  stepping (``s``) or a breakpoint added at run time (``break SEL``) matches it.

    graph = register_graph(gm, "forward[0/0]")
    sites = insert_pauses(gm, PausePlan.build(opts, "forward[0/0]"))
"""

from __future__ import annotations

import dataclasses
import operator
import re
import threading
import warnings

import torch
import torch.fx

from . import graphinfo as gi
from . import ops
from . import selectors as sel
from .options import Options
from .sites import SITES, Site

_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)")


@dataclasses.dataclass(frozen=True)
class PausePlan:
    selectors: tuple[sel.Selector, ...]
    graph_id: str
    step: bool

    @classmethod
    def build(cls, opts: Options, graph_id: str) -> "PausePlan":
        return cls(selectors=tuple(sel.parse_all(opts.pause)), graph_id=graph_id, step=opts.step)


@dataclasses.dataclass(frozen=True)
class GraphRow:
    """One line of a graph listing: a node, what it calls, where it came from, its stop site."""

    node: str
    target: str
    module: str
    source: str
    site: int | None


@dataclasses.dataclass(frozen=True)
class GraphEntry:
    graph_id: str
    rows: tuple[GraphRow, ...]
    graph: torch.fx.Graph       # kept to evaluate `break SEL` with the full selector semantics


class GraphRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._graphs: dict[str, GraphEntry] = {}

    def put(self, entry: GraphEntry) -> None:
        with self._lock:
            self._graphs[entry.graph_id] = entry

    def get(self, graph_id: str) -> GraphEntry | None:
        return self._graphs.get(graph_id)

    def all(self) -> list[GraphEntry]:
        return list(self._graphs.values())


GRAPHS = GraphRegistry()


def wants_pauses(opts: Options) -> bool:
    return bool(opts.pause or opts.step)


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
    selected: dict[torch.fx.Node, str] = {}
    for m in matches:
        for node in _tensor_nodes(m.node):
            selected.setdefault(node, m.selector.text)
    values = [n for n in graph.nodes if gi.is_value_node(n) and isinstance(gi.example_value(n), torch.Tensor)]
    last_of_line = _last_of_line(values)
    sites: list[Site] = []
    rows: dict[str, int] = {}
    for node in values:
        if not node.users and node not in selected:
            continue
        site = _add_site(node, plan, selected.get(node), last_of_line)
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


class TwoVariants:
    """Run the graph with stop points only when the stepper could stop in it, else the plain graph.

    Step points after every node cost several times the graph (each is an op call Inductor cannot
    fuse across). A graph whose pause selectors are cleared, a detached stepper (no terminal, no
    commands), or `continue` with no pause left in the graph: the plain variant runs, at the cost
    of the graph without dynstep. Stepping (`s`, `n`), a live pause selector or a `break` on one
    of its nodes selects the variant with stop points for the next call.
    """

    def __init__(self, stepping, quiet, sites: list[Site]) -> None:
        from .stepper import STEPPER

        self.stepping, self.quiet, self._stepper = stepping, quiet, STEPPER
        self.ids = frozenset(s.id for s in sites)
        self.pauses = {s.id: s.probe for s in sites if s.actions == ("pause",)}
        self.graph_id = sites[0].graph if sites else ""
        # Dynamo wraps what a backend returns and names the wrapper after it (tracebacks, views)
        self.__name__ = getattr(stepping, "__name__", "forward")
        self.__qualname__ = getattr(stepping, "__qualname__", self.__name__)

    def __call__(self, *args):
        variant = self.stepping if self._stepper.may_stop(self.ids, self.pauses) else self.quiet
        return variant(*args)

    def __repr__(self) -> str:
        return f"<dynstep graph {self.graph_id}: {self.stepping!r} while stepping, else {self.quiet!r}>"


def two_variants(stepping, quiet, sites: list[Site]) -> TwoVariants:
    return TwoVariants(stepping, quiet, sites)


def configure_stepper(opts: Options) -> None:
    """Tell the stepper who answers stops (pauses, steps, nan="stop") for graphs compiled with opts."""
    from .stepper import STEPPER

    STEPPER.configure(frontend=opts.frontend, commands=opts.commands, step=opts.step)


def _warn_unmatched(graph: torch.fx.Graph, chosen: list, matches: list, graph_id: str) -> None:
    hit = {m.selector.text for m in matches}
    for s in chosen:
        if s.text not in hit:
            near = ", ".join(sel.candidates(graph, s)) or "nothing"
            warnings.warn(f"dynstep: pause selector {s.text!r} matched nothing in graph {graph_id} (no stop points "
                          f"there); closest candidates: {near}", UserWarning, stacklevel=3)


def _tensor_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """A tensor node itself; for a tuple-valued node, its getitem users (where its tensors live)."""
    if isinstance(gi.example_value(node), torch.Tensor):
        return [node]
    return [u for u in node.users if u.op == "call_function" and u.target is operator.getitem
            and isinstance(gi.example_value(u), torch.Tensor)]


def _add_site(node: torch.fx.Node, plan: PausePlan, selector: str | None, last_of_line: set) -> Site:
    src, text = gi.source(node)
    user_name = ""
    match = _ASSIGN.match(text)
    if match and node in last_of_line:
        user_name = match.group(1)
    return SITES.add(kind="pause", probe=selector or "", node=node.name, target=gi.op_name(node),
                     module=gi.module_path(node), source=src, source_text=text, graph=plan.graph_id,
                     actions=("pause",) if selector else ("step",), capacity=1,
                     inputs=tuple(a.name for a in node.all_input_nodes
                                  if isinstance(gi.example_value(a), torch.Tensor)),
                     user_name=user_name,
                     frames=tuple(f"{f.file}:{f.line}" for f in gi.user_frames(node)))


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


def break_sites(selector: sel.Selector) -> set[int]:
    """Every registered stop site a `break SEL` selector picks, with the pass's selector semantics."""
    out: set[int] = set()
    for entry in GRAPHS.all():
        by_name = {row.node: row.site for row in entry.rows if row.site is not None}
        for m in sel.select(entry.graph, [selector], aten_level=False):
            for node in _tensor_nodes(m.node):
                if node.name in by_name:
                    out.add(by_name[node.name])
    return out
