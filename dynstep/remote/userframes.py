"""The user's frames at a runtime stop, and the names an expression evaluated in one of them sees.

A stop inside a compiled graph has two kinds of user frame. The node's stack trace (`Site.frames`,
outermost first) names the lines of the compiled code that made the node: the node's own line,
then the lines that called into it, up to the function Dynamo compiled. The Python frames that led
into the graph call (`python_frames`) are real frames; the innermost of them that runs the
compiled function itself is the same function as the stack trace's outermost line, so the two are
shown as one frame (`root_frame`): its locals are the function's real locals when the graph was
entered.

What `evaluate` sees in such a frame (`frame_names`): the stopped value (`value`, its node's FX
name, and at the node's own line the variable the line assigns), the node's inputs by FX name, and
in the compiled function's own frame the graph inputs by their source names and that frame's real
locals. Values a frame computed earlier inside the graph are not kept at a stop: a name not found
is said plainly (`unavailable`), with what the frame does have.

    frames = python_frames(skip_dirs)        # innermost first, the launcher's frames left out
    root = root_frame("model.py:36", frames) # the Python frame running that compiled code, or None
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
from typing import Any

import torch

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


def stack_locations(stop: Stop) -> list[str]:
    """"path:line" of the node's user frames, innermost first. A site placed without them (a probe
    from an older pass) takes them from the graph listing's node of the same name."""
    site = stop.site
    if site.frames:
        return list(reversed(site.frames))
    entry = GRAPHS.get(site.graph)
    node = next((n for n in entry.graph.nodes if n.name == site.node.split("[")[0]), None) if entry else None
    if node is not None:
        from ..graph import info as gi

        frames = gi.user_frames(node)
        if frames:
            return [f"{f.file}:{f.line}" for f in reversed(frames)]
    return [site.source] if site.source else []


def root_frame(location: str, frames: list[types.FrameType]) -> types.FrameType | None:
    """The innermost Python frame of the file of `location` whose code spans its line: the frame that
    runs the compiled function (Dynamo's transformed code keeps the function's file and lines)."""
    file, _, line = location.rpartition(":")
    if not line.isdigit():
        return None
    real = os.path.realpath(file)
    for f in frames:
        code = f.f_code
        if os.path.realpath(code.co_filename) != real:
            continue
        lines = [n for _, _, n in code.co_lines() if n is not None]
        if lines and min(lines + [code.co_firstlineno]) <= int(line) <= max(lines):
            return f
    return None


def frame_names(stepper: Stepper, stop: Stop, frame: NodeFrame) -> dict[str, Any]:
    """What an expression evaluated in this user frame sees (later entries win)."""
    site = stop.site
    names: dict[str, Any] = {"torch": torch, **stepper.user_vars}
    names.update({n: t for n, t in stop.inputs.items() if n in site.inputs})       # the node's inputs, FX names
    names.update({n: stop.value for n in ("value", site.node) if n})
    if frame.level == 0 and site.user_name:
        names[site.user_name] = stop.value
    if frame.outermost:   # the compiled function's own frame: graph inputs by their source names, real locals
        names.update({n: t for n, t in stop.inputs.items() if n not in site.inputs})
        if frame.py is not None:
            names.update(frame.py.f_locals)
    return names


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
