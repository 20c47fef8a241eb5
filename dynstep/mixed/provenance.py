"""Which Inductor kernel computes which FX node: Inductor's own provenance, kept per compiled graph.

With ``trace.provenance_tracking_level`` on, Inductor records for every compiled graph how the
Dynamo graph's nodes (pre-grad) became post-grad nodes and which kernel launch (``name:N``, N the
launch order) runs which post-grad nodes. `tracking()` turns it on and keeps every graph Inductor
compiles or loads from its cache meanwhile; it must be on *before* a graph is compiled (it is
part of the FX cache key, so a graph cached without it compiles once more).

    with tracking():
        cm(x)
    graph = REGISTRY.by_wrapper(path_of_running_wrapper)
    graph.kernels_for("h")          # the KernelEntry tuple that computes Dynamo node `h`
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

from .. import _compat

# post-grad ops that only alias their input: a node made of these has no kernel of its own
VIEW_OPS = frozenset({"view", "permute", "expand", "reshape", "t", "transpose", "split", "split_with_sizes",
                      "getitem", "_unsafe_view", "squeeze", "unsqueeze", "slice", "select", "as_strided",
                      "alias", "unbind", "detach", "reinterpret_tensor", "chunk", "narrow", "view_as", "unfold",
                      "as_strided_default"})
# dynstep's own nodes (the pause pass's pause_default_3): never what computes a user's value
_DYNSTEP_NODE = re.compile(r"^(?:pause|probe|grad_tap|grad_tap_bw|breakpoint)_default(?:_\d+)?$")
_HANDLE = re.compile(r"^\s*# \[Provenance debug handles\] (\S+):(\d+)\s*$")


@dataclasses.dataclass(frozen=True)
class KernelEntry:
    """One kernel launch in a wrapper, as Inductor's provenance names it."""

    name: str                      # cpp_fused_gelu_mul_0, extern_kernels.addmm, torch.ops.aten.topk.default
    launch: int                    # the ":N" of the provenance key: launch order in the wrapper
    post: tuple[str, ...]          # post-grad nodes it runs
    computes: tuple[str, ...]      # Dynamo nodes with a non-view post-grad node in it
    reads: tuple[str, ...]         # every Dynamo node with any post-grad node in it
    traces: tuple[str, ...]        # the user stack traces behind it (backward graphs have only these)


@dataclasses.dataclass(frozen=True)
class InductorGraph:
    """One graph Inductor compiled: its wrapper module and what its provenance says."""

    wrapper_path: str
    compile_id: str
    is_backward: bool
    group: str                                    # one superstep compile ("" outside one): its variants
    nodes: frozenset[str]                         # Dynamo nodes the mapping knows
    views: frozenset[str]                         # ... of which made only of views (no kernel of their own)
    kernels: tuple[KernelEntry, ...]
    launch_lines: tuple[tuple[str, int, int], ...]   # (kernel name, launch, line in the wrapper)
    wrapper_globals: dict[str, Any] = dataclasses.field(repr=False, compare=False, hash=False)

    def kernels_for(self, node: str) -> tuple[KernelEntry, ...]:
        """The launches that compute `node` (not dynstep's own ops), in launch order."""
        return tuple(k for k in self.kernels if node in k.computes and not _is_dynstep_op(k.name))

    def readers_of(self, node: str) -> tuple[KernelEntry, ...]:
        """Launches that touch `node` without computing it (a view's consumers)."""
        return tuple(k for k in self.kernels if node in k.reads and not _is_dynstep_op(k.name))

    def launch_line(self, kernel: KernelEntry) -> int:
        return next((line for name, launch, line in self.launch_lines
                     if name == kernel.name and launch == kernel.launch), 0)


class Registry:
    """Every Inductor graph seen while tracking, by wrapper path (the newest wins)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._graphs: dict[str, InductorGraph] = {}

    def add(self, facts: _compat.CompiledGraphFacts) -> None:
        if not facts.wrapper_path:   # cpp_wrapper / AOTInductor: no Python wrapper to read
            return
        graph = graph_from(facts, _groups.stack[-1] if getattr(_groups, "stack", None) else "")
        with self._lock:
            self._graphs[graph.wrapper_path] = graph

    def by_wrapper(self, path: str) -> InductorGraph | None:
        return self._graphs.get(path)

    def siblings(self, graph: InductorGraph) -> list[InductorGraph]:
        """The other forward graphs compiled by the same superstep compile (its variant without stop
        points); compile ids alone repeat after torch._dynamo.reset()."""
        with self._lock:
            return [g for g in self._graphs.values() if graph.group and g.group == graph.group and g is not graph
                    and g.is_backward == graph.is_backward]

    def all(self) -> list[InductorGraph]:
        with self._lock:
            return list(self._graphs.values())


REGISTRY = Registry()
_depth = 0
_depth_lock = threading.Lock()
_groups = threading.local()
_group_ids = itertools.count(1)


@contextlib.contextmanager
def tracking(group: str = "") -> Iterator[None]:
    """Inductor's provenance on, and every graph compiled meanwhile kept in `REGISTRY` (nests).
    `group` names one compile whose graphs are variants of each other (superstep's two variants)."""
    global _depth
    stack = _groups.__dict__.setdefault("stack", [])
    with _compat.inductor_provenance(REGISTRY.add):
        with _depth_lock:
            _depth += 1
        if group:
            stack.append(f"{group}#{next(_group_ids)}")
        try:
            yield
        finally:
            if group:
                stack.pop()
            with _depth_lock:
                _depth -= 1


def is_tracking() -> bool:
    return _depth > 0


def graph_from(facts: _compat.CompiledGraphFacts, group: str = "") -> InductorGraph:
    mapping = json.loads(facts.mapping or "{}")
    traces = json.loads(facts.stack_traces or "{}")
    to_pre: dict[str, list[str]] = mapping.get("postToPre", {})
    keyed: dict[str, list[str]] = dict(mapping.get("cppCodeToPost", {}))
    for key in traces:   # backward graphs carry no node mapping, only kernel -> stack traces
        keyed.setdefault(key, [])
    kernels = []
    for key, post in keyed.items():
        name, _, launch = key.rpartition(":")
        reads = tuple(dict.fromkeys(pre for p in post for pre in to_pre.get(p, []) if not _DYNSTEP_NODE.match(pre)))
        computes = tuple(dict.fromkeys(pre for p in post if _base(p) not in VIEW_OPS for pre in to_pre.get(p, [])
                                       if not _DYNSTEP_NODE.match(pre)))
        kernels.append(KernelEntry(name=name or key, launch=int(launch or 0), post=tuple(post), computes=computes,
                                   reads=reads, traces=tuple(traces.get(key, ()))))
    kernels.sort(key=lambda k: k.launch)
    to_post: dict[str, list[str]] = mapping.get("preToPost", {})
    return InductorGraph(wrapper_path=facts.wrapper_path, compile_id=facts.compile_id,
                         is_backward=facts.is_backward, group=group, nodes=frozenset(to_post),
                         views=frozenset(n for n, post in to_post.items() if post and all(_base(p) in VIEW_OPS
                                                                                          for p in post)),
                         kernels=tuple(kernels), launch_lines=_launch_lines(facts.wrapper_path, kernels),
                         wrapper_globals=facts.wrapper_globals)


def _launch_lines(path: str, kernels: list[KernelEntry]) -> tuple[tuple[str, int, int], ...]:
    """The wrapper line of each launch: Inductor writes `# [Provenance debug handles] name:N` right
    above it; without that, the k-th call of a name in the file is its k-th launch."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return ()
    marked: dict[tuple[str, int], int] = {}
    for i, line in enumerate(lines):
        m = _HANDLE.match(line)
        if m:
            j = i + 1
            while j < len(lines) and lines[j].lstrip().startswith("#"):
                j += 1
            marked[(m.group(1), int(m.group(2)))] = j + 1
    out, used = [], {}
    for k in kernels:
        line = marked.get((k.name, k.launch))
        if line is None:
            calls = [i + 1 for i, text in enumerate(lines) if re.match(rf"^\s+(?:\w+ = )?{re.escape(k.name)}\(", text)]
            n = used[k.name] = used.get(k.name, -1) + 1
            line = calls[n] if n < len(calls) else 0
        out.append((k.name, k.launch, line))
    return tuple(out)


def _base(post_node: str) -> str:
    """'permute_17' -> 'permute', 'as_strided_default_3' -> 'as_strided_default'."""
    return re.sub(r"_\d+$", "", post_node)


def _is_dynstep_op(kernel_name: str) -> bool:
    return kernel_name.startswith("torch.ops.dynstep.")
