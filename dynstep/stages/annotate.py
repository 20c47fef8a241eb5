"""Each line of a stage tied to the FX nodes and the user line behind it.

- FX graphs as torch prints them (Dynamo's, AOTAutograd's, post-grad): a ``# File: path:line in fn,
  code: ...`` comment heads the nodes of that user line; each node line gets the node and that line.
- Inductor's output code: every kernel launch in the wrapper gets the Dynamo nodes the kernel
  computes and their user lines, from Inductor's provenance (`dynstep.mixed.provenance`, on for
  `dynstep run --dump` and for graphs with stop points); without it, Inductor's own
  ``# Topologically Sorted Source Nodes: [...]`` comment above an extern kernel call.
- The bytecode: each statement of dynstep's decompiler, with the user line it stands for.

    marks = marks_of(stage, dynamo_sources)       # (LineMark, ...)
"""

from __future__ import annotations

import linecache
import os
import re

from ..mixed import provenance
from .stage import LineMark, Stage

_FILE = re.compile(r"^\s*# File: (?P<file>.+?):(?P<line>\d+) in (?P<fn>.+?)(?:, code: .*)?$")
_NODE = re.compile(r"^\s+(?P<node>[A-Za-z_]\w*)(?:: \"[^\"]*\")? = ")
_SOURCE_NODES = re.compile(r"^\s*# (?:Topologically Sorted )?Source Nodes: \[(?P<nodes>[^\]]*)\]")
_TRACE_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def graph_marks(text: str) -> tuple[LineMark, ...]:
    """Node lines of a printed FX graph, with the user line their ``# File:`` comment names."""
    out, source = [], ""
    for n, line in enumerate(text.splitlines(), start=1):
        head = _FILE.match(line)
        if head:
            source = f"{head['file']}:{head['line']}"
            continue
        node = _NODE.match(line)
        if node and not line.lstrip().startswith(("def ", "class ", "return")):
            out.append(LineMark(n, (node["node"],), source))
    return tuple(out)


def node_sources(dynamo: Stage | None) -> dict[str, str]:
    """Dynamo graph node -> the user's "file:line"."""
    return {n: m.source for m in graph_marks(dynamo.text) for n in m.nodes} if dynamo is not None else {}


def inductor_marks(stage: Stage, sources: dict[str, str]) -> tuple[LineMark, ...]:
    """Kernel launches of Inductor's output code, with the Dynamo nodes each computes and their user lines."""
    graph = provenance.REGISTRY.by_wrapper(stage.path) if stage.path else None
    if graph is not None:
        out = []
        for kernel in graph.kernels:
            line = graph.launch_line(kernel)
            nodes = kernel.computes or kernel.reads
            where = next((sources[n] for n in nodes if sources.get(n)), "") or _trace_source(kernel.traces)
            if line:
                out.append(LineMark(line, tuple(nodes), where))
        if out:
            return tuple(sorted(out, key=lambda m: m.line))
    return _source_node_comments(stage.text, sources)


def _trace_source(traces: tuple[str, ...]) -> str:
    """The innermost user frame of the stack traces provenance keeps (backward kernels have only these)."""
    for trace in traces:
        frames = _TRACE_FRAME.findall(trace)
        if frames:
            return f"{frames[-1][0]}:{frames[-1][1]}"
    return ""


def _source_node_comments(text: str, sources: dict[str, str]) -> tuple[LineMark, ...]:
    out, pending = [], None
    for n, line in enumerate(text.splitlines(), start=1):
        found = _SOURCE_NODES.match(line)
        if found:
            pending = tuple(x.strip() for x in found["nodes"].split(",") if x.strip())
            continue
        if pending is not None and line.strip() and not line.lstrip().startswith("#"):
            out.append(LineMark(n, pending, next((sources[x] for x in pending if sources.get(x)), "")))
            pending = None
    return tuple(out)


def marks_of(stage: Stage, sources: dict[str, str]) -> tuple[LineMark, ...]:
    if stage.name.startswith("inductor"):
        return inductor_marks(stage, sources)
    if stage.name == "bytecode":
        return ()       # the bytecode stage's marks come with its decompilation (dynstep.stages.view)
    return graph_marks(stage.text)


def note_of(mark: LineMark) -> str:
    """``sin, mul · model.py:12  y = torch.sin(x) * 2``"""
    text = ""
    if mark.source:
        file, _, line = mark.source.rpartition(":")
        code = linecache.getline(file, int(line)).strip() if line.isdigit() else ""
        text = f"{os.path.basename(file)}:{line}" + (f"  {code}" if code else "")
    return " · ".join(p for p in (", ".join(mark.nodes), text) if p)
