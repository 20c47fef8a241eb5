"""Selectors: strings that pick values in a compiled graph.

    op:<name>            every node calling that op, by qualified-name suffix
                         (op:layer_norm, op:matmul, op:Tensor.transpose; op:aten.mm after AOTAutograd)
    node:<glob>          those FX nodes' outputs (node:addmm_*)
    module:<glob>        what each matching module call returns (module:blocks.*.mlp)
    in:<glob>            the output of every node executed inside matching modules
    line:<file>:<line>   the result of that source line, once per execution (line:model.py:57)
    *                    every node

Module globs are matched component by component: ``*`` is one path component, ``**`` any
number. Node globs are ``fnmatch`` patterns.

    sel = parse("module:blocks.*.mlp")
    for m in select(graph, [sel]): ...
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import os
import re
from collections.abc import Iterable, Sequence

import torch.fx

from . import info as gi
from . import pieces
from ..core.errors import SelectorError

KINDS = ("op", "node", "module", "in", "line")
GRAMMAR = """selector grammar:
  op:<name>            op:layer_norm  op:matmul  op:aten.addmm (aten ops: after AOTAutograd)
  node:<glob>          node:addmm_*
  module:<glob>        module:blocks.*.mlp   (* = one path component, ** = any)
  in:<glob>            in:blocks.0.attn
  line:<file>:<line>   line:model.py:57   (file may be a basename or a path suffix)
  *                    every node"""


@dataclasses.dataclass(frozen=True)
class Selector:
    kind: str
    pattern: str
    text: str
    line: int = 0

    @property
    def aten_level(self) -> bool:
        """op selectors naming an aten/prims op only match after AOTAutograd."""
        return self.kind == "op" and self.pattern.split(".")[0] in ("aten", "prims")


@dataclasses.dataclass(frozen=True)
class Match:
    node: torch.fx.Node
    selector: Selector
    module: str
    source: str
    modules: tuple[str, ...] = ()   # module: every module whose call returns this value, outermost first


def parse(text: str) -> Selector:
    if not isinstance(text, str):
        raise SelectorError(f"a selector must be a string, got {type(text).__name__}\n{GRAMMAR}")
    stripped = text.strip()
    if stripped == "*":
        return Selector("*", "*", stripped)
    kind, sep, pattern = stripped.partition(":")
    if not sep or kind not in KINDS or not pattern.strip():
        raise SelectorError(f"malformed selector {text!r}\n{GRAMMAR}")
    pattern = pattern.strip()
    if kind == "line":
        file, sep, line = pattern.rpartition(":")
        if not sep or not file or not line.isdigit():
            raise SelectorError(f"malformed line selector {text!r}: expected line:<file>:<line>\n{GRAMMAR}")
        return Selector("line", file, stripped, int(line))
    return Selector(kind, pattern, stripped)


def parse_all(texts: Iterable[str]) -> list[Selector]:
    return [parse(t) for t in texts]


def module_glob_regex(pattern: str) -> re.Pattern[str]:
    """``*`` matches within one path component, ``**`` across components, ``?`` one character."""
    comps = []
    for comp in pattern.split("."):
        if comp == "**":
            comps.append(".*")
            continue
        comps.append("".join("[^.]*" if c == "*" else "[^.]" if c == "?" else re.escape(c) for c in comp))
    return re.compile(r"\.".join(comps) + r"\Z")


def op_matches(name: str, pattern: str) -> bool:
    if name == pattern or name.endswith("." + pattern):
        return True
    if name.startswith(("aten.", "prims.")):  # the overload name is optional: aten.addmm
        base = name.rsplit(".", 1)[0]
        return base == pattern or base.endswith("." + pattern)
    return False


def line_matches(frame: gi.Frame, file: str, line: int) -> bool:
    if frame.line != line:
        return False
    path = frame.file.replace(os.sep, "/")
    return path == file or path.endswith("/" + file.lstrip("/"))


def select(graph: torch.fx.Graph, selectors: Sequence[Selector], *, aten_level: bool) -> list[Match]:
    """Every (node, selector) a list of selectors picks, in graph order, without duplicates.

    In a piece of a split graph (graph/pieces.py) they pick in the whole graph, and the piece keeps
    what falls inside it."""
    found_whole = pieces.whole_of(graph)
    if found_whole is not None:
        whole, back = found_whole
        return [dataclasses.replace(m, node=back[m.node]) for m in _select_here(whole, selectors, aten_level)
                if m.node in back]
    return _select_here(graph, selectors, aten_level)


def unmatched(graph: torch.fx.Graph, selectors: Sequence[Selector], matches: Sequence[Match],
              aten_level: bool) -> list[tuple[torch.fx.Graph, Selector]]:
    """The selectors that matched nothing, with the graph to explain it in. A piece of a split graph
    reports (once, in its first piece) those that match nothing in the whole graph."""
    hit = {m.selector.text for m in matches}
    missing = [s for s in selectors if s.text not in hit]
    found = pieces.whole_of(graph)
    if found is None or not missing:
        return [(graph, s) for s in missing]
    if not pieces.first_piece(graph):
        return []
    elsewhere = {m.selector.text for m in _select_here(found[0], missing, aten_level)}
    return [(found[0], s) for s in missing if s.text not in elsewhere]


def _select_here(graph: torch.fx.Graph, selectors: Sequence[Selector], aten_level: bool) -> list[Match]:
    nodes = [n for n in graph.nodes if gi.is_value_node(n)]
    found: dict[tuple[torch.fx.Node, str], Match] = {}
    returns: dict[torch.fx.Node, list[str]] | None = None
    for sel in selectors:
        if sel.aten_level != aten_level and sel.kind == "op":
            continue
        if sel.kind == "module":   # one value may be the return of several nested modules: one match
            returns = module_returns(nodes) if returns is None else returns
            rx = module_glob_regex(sel.pattern)
            for node, paths in returns.items():
                matched = [p for p in paths if rx.match(p)]
                if matched:
                    found.setdefault((node, sel.text), Match(node, sel, matched[-1], gi.source(node)[0], tuple(paths)))
            continue
        for node, module, src in _select_one(nodes, sel):
            found.setdefault((node, sel.text), Match(node, sel, module, src))
    order = {n: i for i, n in enumerate(graph.nodes)}
    return sorted(found.values(), key=lambda m: order[m.node])


def _select_one(nodes: list[torch.fx.Node], sel: Selector):
    if sel.kind == "*":
        return [(n, gi.module_path(n), gi.source(n)[0]) for n in nodes]
    if sel.kind == "op":
        return [(n, gi.module_path(n), gi.source(n)[0]) for n in nodes if op_matches(gi.op_name(n), sel.pattern)]
    if sel.kind == "node":
        return [(n, gi.module_path(n), gi.source(n)[0]) for n in nodes if fnmatch.fnmatchcase(n.name, sel.pattern)]
    if sel.kind == "in":
        rx = module_glob_regex(sel.pattern)
        return [(n, gi.module_path(n), gi.source(n)[0]) for n in nodes
                if any(rx.match(p) for p in gi.module_stack(n))]
    return _line_results(nodes, sel.pattern, sel.line)


def module_returns(nodes: list[torch.fx.Node]) -> dict[torch.fx.Node, list[str]]:
    """Each value some module call returns, as a forward hook sees it, with every such module (outermost
    first: `mlp` and `mlp.down` when mlp returns down(...)), in graph order.

    A value the call returns is used after the call: by a later node, or (when the compiled function
    returns it as it is) only by the graph's output. A value that leaves only through state the call
    mutated — a KV cache's `self.keys = torch.cat(...)`, which Dynamo hands back as a graph output —
    is not a return, although it also reaches the output node.
    """
    out: dict[torch.fx.Node, list[str]] = {}
    open_runs: dict[str, list[torch.fx.Node]] = {}
    for n in nodes + [None]:     # one pass: a path's run ends at the first node outside that module
        stack = gi.module_stack(n) if n is not None else ()
        for path in [p for p in open_runs if p not in stack]:
            _returns_of_run(path, open_runs.pop(path), out)
        for path in stack:
            open_runs.setdefault(path, []).append(n)
    order = {n: i for i, n in enumerate(nodes)}
    for paths in out.values():
        paths.sort(key=lambda p: p.count("."))
    return dict(sorted(out.items(), key=lambda kv: order[kv[0]]))


def _returns_of_run(path: str, run: list[torch.fx.Node], out: dict[torch.fx.Node, list[str]]) -> None:
    inside = set(run)
    for n in run:
        # dynstep's own nodes (pauses placed before probes) are not uses of the value
        after = [u for u in _uses(n) if u not in inside and not gi.is_dynstep_node(u)]
        if not after or not gi.tensor_leaves(n):
            continue
        if all(u.op == "output" for u in after) and gi.stores_state(n):
            continue
        out.setdefault(n, []).append(path)


def _uses(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The node's users, looking through gradient taps (another probe pass's `grad_tap` passes the
    value on to the model: its users are the value's uses)."""
    out = []
    for user in node.users:
        if user.op == "call_function" and str(user.target) == "dynstep.grad_tap.default":
            out += _uses(user)
        else:
            out.append(user)
    return out


def _runs(nodes: list[torch.fx.Node], pred) -> list[list[torch.fx.Node]]:
    runs: list[list[torch.fx.Node]] = []
    current: list[torch.fx.Node] = []
    for n in nodes:
        if pred(n):
            current.append(n)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def _line_results(nodes: list[torch.fx.Node], file: str, line: int):
    """The last tensor node of each execution of the line, at any depth of the call stack."""
    def on_line(n: torch.fx.Node) -> bool:
        return any(line_matches(f, file, line) for f in gi.user_frames(n))

    out = []
    for run in _runs(nodes, on_line):
        for execution in _split_executions(run):
            tensors = [n for n in execution if gi.tensor_leaves(n)]
            if tensors:
                last = tensors[-1]
                out.append((last, gi.module_path(last), f"{os.path.basename(file)}:{line}"))
    return out


_NUM = re.compile(r"\.\d+(?=\.|$)")


def _split_executions(run: list[torch.fx.Node]) -> list[list[torch.fx.Node]]:
    """Split a run of nodes of one line where a loop moves to the next sibling module.

    ``for b in self.blocks: x = b(x)`` gives nodes inside blocks.0, then blocks.1, ...; each
    sibling (same path but for a numeric index) starts a new execution of the line. A loop on one
    line that calls no module cannot be split from graph metadata and yields one value.
    """
    depth = min(len(gi.module_stack(n)) for n in run)
    executions: list[list[torch.fx.Node]] = [[]]
    seen: dict[str, str] = {}
    for n in run:
        stack = gi.module_stack(n)
        if len(stack) > depth:
            entered = stack[depth]
            generic = _NUM.sub(".#", entered)
            if generic != entered and seen.get(generic, entered) != entered:
                executions.append([])
                seen = {}
            seen[generic] = entered
        executions[-1].append(n)
    return [e for e in executions if e]


def unmatched_message(graph: torch.fx.Graph, sel: Selector, what: str) -> str:
    """Why `sel` placed nothing in this graph: what would match inside bodies dynstep cannot probe
    (a torch.utils.checkpoint region), or the closest names that are present."""
    hidden = [n for hop in graph.nodes for n in gi.body_nodes(hop)
              if any(match.node is n for match in _select_in(n.graph, sel))]
    if hidden:
        regions = sorted({gi.module_path(hop) or hop.name for hop in graph.nodes if gi.body_nodes(hop)
                          and set(gi.body_nodes(hop)) & set(hidden)})
        return (f"{what} {sel.text!r} names {len(hidden)} node(s) inside an activation-checkpointed region "
                f"(torch.utils.checkpoint) of {', '.join(regions)}, which dynstep cannot probe inside; probe what "
                f"the region returns (module:{regions[0]}) or run without checkpointing")
    near = ", ".join(candidates(graph, sel)) or "nothing"
    return f"{what} {sel.text!r} matched nothing; closest candidates: {near}"


def _select_in(graph: torch.fx.Graph, sel: Selector) -> list[Match]:
    try:
        return select(graph, [sel], aten_level=sel.aten_level)
    except Exception:   # a body the selector cannot read (no metadata): nothing hidden there
        return []


def candidates(graph: torch.fx.Graph, sel: Selector, limit: int = 5) -> list[str]:
    """The names present in the graph closest to what an unmatched selector asked for."""
    nodes = [n for n in graph.nodes if gi.is_value_node(n)]
    if sel.kind in ("module", "in"):
        pool = sorted({p for n in nodes for p in gi.module_stack(n)})
        query = sel.pattern
    elif sel.kind == "op":
        pool = sorted({gi.op_name(n) for n in nodes})
        query = sel.pattern
        pool_short = {p.rsplit(".", 1)[-1]: p for p in pool}
        close = difflib.get_close_matches(query.rsplit(".", 1)[-1], list(pool_short), n=limit, cutoff=0.4)
        if close:
            return [pool_short[c] for c in close]
    elif sel.kind == "line":
        pool = sorted({f.location for n in nodes for f in gi.user_frames(n)})
        query = f"{os.path.basename(sel.pattern)}:{sel.line}"
    else:
        pool = [n.name for n in nodes]
        query = sel.pattern
    close = difflib.get_close_matches(query, pool, n=limit, cutoff=0.3)
    return close or pool[:limit]
