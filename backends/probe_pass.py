"""The probe pass: insert `dynstep::probe` (and gradient taps) after the values selectors pick.

Two levels:
- the Dynamo graph (torch IR, what the user's code calls), before the inner compiler:
  value probes for every selector kind but ``op:aten.*``, and `grad_tap` identities for
  gradients;
- AOTAutograd's partitioned graphs (aten IR), from the inner compiler's forward/backward hooks:
  ``op:aten.*`` probes in the forward graph; in the backward graph each `grad_tap_bw` becomes a
  probe on the gradient (effectful ops cannot pass the partitioner: pytorch#172248).

    plan = ProbePlan.build(options, graph_id)
    sites = insert_probes(gm, plan, aten_level=False)
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import warnings

import torch
import torch.fx

from dynstep import _compat
from dynstep.core.options import Options
from dynstep.core.sites import SITES, Site
from dynstep.graph import identity as ident
from dynstep.graph import info as gi
from dynstep.graph import selectors as sel
from dynstep.ops import schema as ops
from dynstep.probe import fastpath
from dynstep.probe import registration as probe_kernel

log = logging.getLogger("dynstep")


@dataclasses.dataclass(frozen=True)
class ProbePlan:
    selectors: tuple[sel.Selector, ...]
    actions: tuple[str, ...]
    capacity: int
    grads: bool
    nan_mode: str | None
    graph_id: str
    inner_has_aot: bool
    owner: str = ""       # "flight": the flight recorder's sites (dynstep.core.sites.Site.owner)

    @classmethod
    def build(cls, opts: Options, graph_id: str, *, inner_has_aot: bool) -> "ProbePlan":
        return cls(selectors=tuple(sel.parse_all(opts.probe)), actions=tuple(a for a in opts.actions if a != "nan"),
                   capacity=opts.record, grads=opts.grads, nan_mode=opts.nan, graph_id=graph_id,
                   inner_has_aot=inner_has_aot)


def insert_probes(gm: torch.fx.GraphModule, plan: ProbePlan, *, aten_level: bool) -> list[Site]:
    """Insert value probes (and, at the Dynamo level, gradient taps). Returns the new sites."""
    graph = gm.graph
    selectors = [s for s in plan.selectors if s.aten_level == aten_level]
    matches = sel.select(graph, selectors, aten_level=aten_level)
    if matches or (plan.nan_mode and not aten_level):
        probe_kernel.ensure()
    _warn_unmatched(graph, selectors, matches, plan, aten_level)
    checking = bool(plan.nan_mode) and not aten_level
    chosen = _per_value(matches, plan.actions + (("nan",) if checking else ()))
    if checking:   # `nan` checks every other value too (and, with grads=True, the gradient flowing into it)
        for node in graph.nodes:
            if gi.is_value_node(node) and node not in chosen:
                chosen[node] = ("*", gi.module_path(node), gi.source(node)[0], ("nan",), ())
    sites: list[Site] = []
    cursor: dict[torch.fx.Node, torch.fx.Node] = {}
    order = _order(graph)
    names = ident.identities(graph) if chosen else {}   # before getitems are added: they take their tuple's
    for node, (probe, module, source, actions, modules) in sorted(chosen.items(), key=lambda kv: order(kv[0])):
        sites += _probe_node(graph, node, probe, (module, modules), source, plan, actions, cursor,
                             grads=plan.grads and not aten_level, identity=names.get(node))
    if sites:
        graph.lint()
        gm.recompile()
        log.debug("dynstep: %d probe site(s) in %s", len(sites), plan.graph_id)
    return sites


def insert_grad_pauses(gm: torch.fx.GraphModule, selectors: list[sel.Selector], graph_id: str) -> list[Site]:
    """For each pause-selected value that needs a gradient: a tap whose backward stops the stepper."""
    graph = gm.graph
    sites = []
    probe_kernel.ensure()
    seen: set[torch.fx.Node] = set()
    for m in sel.select(graph, [s for s in selectors if not s.aten_level], aten_level=False):
        if m.node in seen:   # one stop per value, whichever selectors picked it
            continue
        seen.add(m.node)
        for index, value in gi.tensor_leaves(m.node):
            if index is not None or not getattr(value, "requires_grad", False):
                continue
            node = m.node
            site = SITES.add(kind="grad", actions=("pause",), probe=m.selector.text, node=node.name,
                             target=gi.op_name(node), module=m.module, source=m.source, modules=m.modules,
                             source_text=gi.source(node)[1], graph=graph_id, capacity=1,
                             frames=tuple(f"{f.file}:{f.line}" for f in gi.user_frames(node)))
            own = [u for u in node.users if gi.is_dynstep_node(u) and u.args and u.args[0] is node]
            _insert_tap(graph, node, node, value, site.id, after=max(own, key=_order(graph), default=node))
            sites.append(site)
    if sites:
        graph.lint()
        gm.recompile()
    return sites


def _insert_tap(graph: torch.fx.Graph, node: torch.fx.Node, value_node: torch.fx.Node, value: torch.Tensor,
                site_id: int, *, after: torch.fx.Node) -> torch.fx.Node:
    """`grad_tap(value_node, site)` after `after`; every non-dynstep user of the value reads the tap."""
    with graph.inserting_after(after):
        tap = graph.call_function(ops.grad_tap, (value_node, site_id))
    tap.meta.update(_inherited_meta(node))
    tap.meta["example_value"] = value
    value_node.replace_all_uses_with(tap, delete_user_cb=lambda u: u is not tap and not gi.is_dynstep_node(u))
    return tap


def _per_value(matches: list[sel.Match], actions: tuple[str, ...]) -> dict[torch.fx.Node, tuple]:
    """One probe per value: a list of selectors is a union, so a node picked by several selectors is
    probed once, its probe named by all of them ("op:layer_norm | line:model.py:33")."""
    grouped: dict[torch.fx.Node, list[sel.Match]] = {}
    for m in matches:
        grouped.setdefault(m.node, []).append(m)
    return {node: (" | ".join(dict.fromkeys(m.selector.text for m in ms)), ms[0].module, ms[0].source, actions,
                   max((m.modules for m in ms), key=len))
            for node, ms in grouped.items()}


def _order(graph: torch.fx.Graph):
    index = {n: i for i, n in enumerate(graph.nodes)}
    return lambda n: index[n]


def _probe_node(graph: torch.fx.Graph, node: torch.fx.Node, probe: str, where: tuple[str, tuple[str, ...]],
                source: str, plan: ProbePlan, actions: tuple[str, ...], cursor: dict, *, grads: bool,
                identity: ident.NodeIdentity | None = None) -> list[Site]:
    module, modules = where
    leaves = gi.tensor_leaves(node)
    if not leaves:
        log.debug("dynstep: %s (%s) is not a tensor value; not probed", node.name, gi.op_name(node))
        return []
    src_text = gi.source(node)[1]
    target = gi.op_name(node)
    out = []
    for index, value in leaves:
        value_node = node if index is None else _element(graph, node, index, cursor)
        common = dict(probe=probe, node=node.name if index is None else f"{node.name}[{index}]",
                      target=target, module=module, source=source, source_text=src_text,
                      graph=plan.graph_id, capacity=plan.capacity, nan_mode=plan.nan_mode, owner=plan.owner,
                      modules=modules,
                      frames=tuple(f"{f.file}:{f.line}" for f in gi.user_frames(node)),   # a nan stop's user frames
                      identity=ident.with_output(identity, index))
        site = SITES.add(kind="value", actions=actions, **common)
        after = cursor.get(value_node, value_node)
        with graph.inserting_after(after):
            p = graph.call_function(ops.probe, (value_node, site.id))
        p.meta.update(_inherited_meta(node))
        cursor[value_node] = p
        out.append(site)
        if grads and getattr(value, "requires_grad", False):
            gsite = SITES.add(kind="grad", actions=actions, **common)
            tapped = _last_tap(value_node)   # another pass's tap on this value: chain after it
            after = cursor[value_node] if tapped is value_node else tapped
            cursor[value_node] = _insert_tap(graph, node, tapped, value, gsite.id, after=after)
            out.append(gsite)
    return out


def _last_tap(value_node: torch.fx.Node) -> torch.fx.Node:
    """The value, or the last gradient tap on it that an earlier pass inserted (the model reads that
    tap: a second tap must read it too, or it would have no user and its gradient no probe)."""
    tap = value_node
    while True:
        nxt = next((u for u in tap.users if u.op == "call_function" and u.target is ops.grad_tap), None)
        if nxt is None:
            return tap
        tap = nxt


def _element(graph: torch.fx.Graph, node: torch.fx.Node, index: int, cursor: dict) -> torch.fx.Node:
    for user in node.users:
        if user.op == "call_function" and user.target is operator.getitem and user.args[1] == index:
            return user
    with graph.inserting_after(cursor.get(node, node)):
        item = graph.call_function(operator.getitem, (node, index))
    item.meta.update(_inherited_meta(node))
    value = gi.example_value(node)
    item.meta["example_value" if "example_value" in node.meta else "val"] = value[index]
    cursor[node] = item
    return item


def _inherited_meta(node: torch.fx.Node) -> dict:
    return {k: node.meta[k] for k in ("stack_trace", "nn_module_stack", "seq_nr") if k in node.meta}


def _warn_unmatched(graph, selectors, matches, plan: ProbePlan, aten_level: bool) -> None:
    for where, s in sel.unmatched(graph, selectors, matches, aten_level):
        if s.aten_level and not aten_level:
            continue
        warnings.warn(f"dynstep: in graph {plan.graph_id}: {sel.unmatched_message(where, s, 'selector')}",
                      UserWarning, stacklevel=2)


def warn_aten_without_aot(plan: ProbePlan, inner: str) -> None:
    for s in plan.selectors:
        if s.aten_level:
            warnings.warn(f"dynstep: selector {s.text!r} names an aten op, which exists only after "
                          f"AOTAutograd; inner compiler {inner!r} never has one. Use inner='aot_eager' "
                          "or 'inductor', or a torch-level name (op:mm, op:layer_norm).", UserWarning,
                          stacklevel=2)


def direct_probe_calls(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """For a graph that Python runs node by node (aot_eager, eager): call the probe through
    `dynstep.fastpath` instead of the op, and drop AOTAutograd's effect tokens around it.

    Run eagerly, `with_effects(token, dynstep.probe, x, site)` goes through the higher-order op's
    Python dispatch (about 50 µs per probe, bench/probe_overhead.py: tokens), and an op call
    through the dispatcher costs microseconds more than the direct entry. An FX graph runs its
    nodes in order, so the order the token enforced holds without it (Inductor removes the
    tokens itself and is not given this graph).
    """
    graph = gm.graph
    with_effects = _compat.with_effects_op()
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is ops.probe:
            node.target = fastpath.probe
            changed = True
        elif node.target is with_effects and node.args[1] is ops.probe:
            token = node.args[0]
            with graph.inserting_before(node):
                call = graph.call_function(fastpath.probe, tuple(node.args[2:]))
            call.meta.update(_inherited_meta(node))
            for user in list(node.users):  # getitem(with_effects, 0): the token, passed on unchanged
                user.replace_all_uses_with(token)
                graph.erase_node(user)
            graph.erase_node(node)
            changed = True
    if changed:
        graph.lint()
        gm.recompile()
    return gm


def rewrite_partitioned(gm: torch.fx.GraphModule, plan: ProbePlan, is_backward: bool) -> torch.fx.GraphModule:
    """The inner compiler's hook on AOTAutograd's forward/backward/inference graphs."""
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is ops.grad_tap:
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            changed = True
        elif node.target is ops.grad_tap_bw:
            grad, site_id = node.args
            node.replace_all_uses_with(grad)
            with graph.inserting_after(node):
                p = graph.call_function(ops.probe, (grad, site_id))
            p.meta.update(_inherited_meta(node))
            graph.erase_node(node)
            changed = True
    if not is_backward and any(s.aten_level for s in plan.selectors):
        changed |= bool(insert_probes(gm, plan, aten_level=True))
    if changed:
        graph.lint()
        gm.recompile()
    return gm
