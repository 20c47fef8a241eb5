"""The user's frames at a runtime stop, and the names an expression evaluated in one of them sees.

A stop inside a compiled graph has two kinds of user frame. The node's stack trace (`Site.frames`,
outermost first) names the lines of the compiled code that made the node: the node's own line,
then the lines that called into it, up to the function Dynamo compiled. The Python frames that led
into the graph call (`python_frames`) are real frames; the innermost of them that runs the
compiled function itself is the same function as the stack trace's outermost line, so the two are
shown as one frame (`root_frame`): its locals are the function's real locals when the graph was
entered.

What `evaluate` sees in such a frame (`frame_names`): the stopped value (`value`, its node's FX
name, and at the node's own line the variable the line assigns), the node's inputs by FX name and,
where an input was assigned to a variable in this same frame, by that variable's name; in the
compiled function's own frame also the graph inputs by their source names and that frame's real
locals. Values a frame computed earlier inside the graph are not kept at a stop: a name not found
is said plainly (`unavailable`), with what the frame does have.

    frames = python_frames(skip_dirs)        # innermost first, the launcher's frames left out
    root = root_frame("model.py:36", frames) # the Python frame running that compiled code, or None
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache
import os
import sys
import types
from typing import Any

import torch

from ..core.sites import SITES, UserLine
from ..graph import info as gi
from ..step.graphs import GRAPHS
from ..step.stepper import Stepper, Stop


@dataclasses.dataclass(frozen=True)
class NodeFrame:
    """A frame standing for the stopped node: the graph listing (level -1), the node's own line
    (level 0) or a line of the compiled code that called into it (1, 2, ...). `py` is the Python
    frame running the compiled function, for its outermost line."""

    level: int = -1
    py: types.FrameType | None = None
    outermost: bool = False


def python_frames(skip_dirs: tuple[str, ...]) -> list[types.FrameType]:
    """The Python frames that led into the stop, innermost first, without torch's and dynstep's own.
    The program's main module frame is the last one: what called it (`dynstep run`'s launcher
    script, runpy, an IDE's runner) is not the user's program."""
    out, f = [], sys._getframe(1)
    while f is not None:
        file = f.f_code.co_filename
        if not (file.startswith("<") or file.startswith(skip_dirs) or os.path.basename(file) == "runpy.py"):
            out.append(f)
            if f.f_code.co_name == "<module>" and f.f_globals.get("__name__") == "__main__":
                break
        f = f.f_back
    return out


def stack_locations(stop: Stop) -> list[UserLine]:
    """The node's user frames, innermost first. A site placed without them (a probe from an older
    pass) takes them from the graph listing's node of the same name."""
    site = stop.site
    if site.frames:
        return list(reversed(site.frames))
    entry = GRAPHS.get(site.graph)
    node = next((n for n in entry.graph.nodes if n.name == site.node.split("[")[0]), None) if entry else None
    if node is not None:
        frames = gi.user_frames(node)
        if frames:
            return [UserLine(f.file, f.line) for f in reversed(frames)]
    return [UserLine.parse(site.source)] if site.source else []


def root_frame(location: UserLine, frames: list[types.FrameType]) -> types.FrameType | None:
    """The innermost Python frame of the file of `location` whose function spans its line: the frame
    that runs the compiled function. Dynamo's transformed code keeps the function's file and first
    line but not its line table, so the span is the function's in the source (`_span`)."""
    if location.line <= 0:
        return None
    real = os.path.realpath(location.file)
    for f in frames:
        code = f.f_code
        if os.path.realpath(code.co_filename) == real:
            span = _span(code.co_filename, code.co_firstlineno)
            if span is not None and span[0] <= location.line <= span[1]:
                return f
    return None


def _span(file: str, first: int) -> tuple[int, int, frozenset[str]] | None:
    """(first line, last line, the names it binds) of the function whose code starts at `first`."""
    for node in _functions(file, _mtime(file)):
        starts = [node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())]
        if first in starts:
            names = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            return min(starts), node.end_lineno or node.lineno, frozenset(names)
    return None


def _mtime(file: str) -> float:
    try:
        return os.stat(file).st_mtime
    except OSError:
        return 0.0


@functools.lru_cache(maxsize=64)
def _functions(file: str, mtime: float) -> tuple[ast.AST, ...]:
    try:
        tree = ast.parse("".join(linecache.getlines(file)) or open(file, encoding="utf-8").read(), file)
    except (OSError, SyntaxError, ValueError):
        return ()
    return tuple(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def frame_names(stepper: Stepper, stop: Stop, frame: NodeFrame) -> dict[str, Any]:
    """What an expression evaluated in this user frame sees. Later entries win: what this frame assigned
    inside the graph is newer than its locals when the graph was entered."""
    site = stop.site
    names: dict[str, Any] = {"torch": torch, **stepper.user_vars}
    names.update({n: t for n, t in stop.inputs.items() if n in site.inputs})       # the node's inputs, FX names
    names.update({n: stop.value for n in ("value", site.node) if n})
    if frame.outermost:   # the compiled function's own frame: its real locals, graph inputs by source names
        if frame.py is not None:
            names.update(user_locals(frame.py))
        names.update({n: t for n, t in stop.inputs.items() if n not in site.inputs})
    names.update(_assigned_here(stop, frame.level))
    if frame.level == 0 and site.user_name:
        names[site.user_name] = stop.value
    return names


def user_locals(frame: types.FrameType) -> dict[str, Any]:
    """A compiled function's frame's locals, without the ones Dynamo's transformed code adds (tmp_1,
    __compiled_fn_...): only names the function itself binds, when its source can be read."""
    span = _span(frame.f_code.co_filename, frame.f_code.co_firstlineno)
    return {k: v for k, v in frame.f_locals.items() if span is None or k in span[2]}


def _assigned_here(stop: Stop, level: int) -> dict[str, Any]:
    """The node's inputs by the variable each was assigned to, when that assignment ran in the frame at
    `level` (the same chain of calling lines): `h` for the `matmul` that `h = x @ w` made."""
    site, entry = stop.site, GRAPHS.get(stop.site.graph)
    if entry is None or not site.frames:
        return {}
    callers = site.frames[:len(site.frames) - level - 1]
    ids = {row.node: row.site for row in entry.rows if row.site is not None}
    out = {}
    for name in site.inputs:
        other = SITES.get(ids[name]) if name in ids else None
        if other is not None and other.user_name and other.frames[:-1] == callers and name in stop.inputs:
            out[other.user_name] = stop.inputs[name]
    return out


def unavailable(name: str, frame: NodeFrame, names: dict[str, Any]) -> str:
    """Why a name the user typed in a frame of the compiled code is not there, and what is."""
    have = ", ".join(sorted(n for n in names if n != "torch" and not n.startswith("__"))[:12]) or "nothing else"
    where = ("this line was inlined into the compiled graph: its locals exist only as values inside the graph"
             if not frame.outermost else
             "dynstep has this frame's locals as they were when the compiled graph was entered"
             if frame.py is not None else "the Python frame that ran this compiled code was not found")
    return (f"NameError: {name!r} is not available in this frame at this stop ({where}; values the frame "
            f"computed inside the compiled graph are not kept: a breakpoint on their line shows them). "
            f"Here: {have}")
