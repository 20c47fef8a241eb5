"""The DAP side of one runtime stop: stack frames, scopes, variables, evaluate and inject.

Built on the program thread when the stepper stops and used only there (torch's thread-local
state: grad mode, autocast, the current stream). Frames, innermost first:

    forward[0_0].graph.py : the paused node in the graph listing (a virtual source)
    model.py:33           : the user's frames from the node's stack trace (a nan="stop" too); the
                            outermost one is also the Python frame running the compiled function
    train.py:12           : the Python frames that called the compiled function (their locals), up to
                            the program's main module (a launcher's own frames are left out)

`evaluate` in a user frame sees that frame's names (userframes.py); at the graph listing it also
runs dynstep's commands. A client that did not declare `supportsVariablePaging` gets a large
tensor's rows in groups of 100 (`[0:100]`, ...), each expandable; one that did pages with start/count.

Inject goes through the stepper's own rules (`set NAME = EXPR`): a wrong shape or dtype is an
error response, later nodes see a written value, under Inductor too.
"""

from __future__ import annotations

import re

import dataclasses
import linecache
import os
import types
from typing import Any

import torch

from ..core.command_table import NODE_STOP
from ..core.events import use_sink
from ..step.stepper import Stepper, Stop
from .protocol import DapError
from .sources import Sources
from .texts import event_text
from .userframes import NodeFrame, frame_names, python_frames, root_frame, stack_locations, unavailable
from .variables import Handles, MappingChildren, expandable, short, type_name

__all__ = ["NodeFrame", "PyFrame", "View", "StopView", "python_frames"]

RESUME_COMMANDS = NODE_STOP.words(NODE_STOP.resuming | {"quit"})   # the debugger's buttons do these


@dataclasses.dataclass(frozen=True)
class PyFrame:
    frame: types.FrameType


class View:
    """What every stop view shares: handles, frames (paged), variables."""

    paging = True      # the client pages variables itself (initialize: supportsVariablePaging); set per stop

    def __init__(self, sources: Sources, py_frames: list[types.FrameType]) -> None:
        self.sources = sources
        self.py_frames = py_frames
        self.handles = Handles()
        self._frames: list[dict[str, Any]] | None = None

    def build_frames(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def py_frame_bodies(self, frames: list[types.FrameType] | None = None) -> list[dict[str, Any]]:
        return [{"id": self.handles.add(PyFrame(f)), "name": f.f_code.co_name, "line": f.f_lineno or 0, "column": 1,
                 "source": {"name": os.path.basename(f.f_code.co_filename),
                            "path": os.path.abspath(f.f_code.co_filename)}}
                for f in (self.py_frames if frames is None else frames)]

    def stop_stackTrace(self, args: dict[str, Any]) -> dict[str, Any]:
        if self._frames is None:
            self._frames = self.build_frames()   # built once: frame ids stay the same for this stop
        start = _int(args.get("startFrame"), 0)
        levels = _int(args.get("levels"), 0)
        picked = self._frames[start:start + levels] if levels > 0 else self._frames[start:]
        return {"stackFrames": picked, "totalFrames": len(self._frames)}

    def variable(self, name: str, value: Any, evaluate_name: str = "") -> dict[str, Any]:
        out = {"name": name, "value": short(value), "type": type_name(value), "variablesReference": 0}
        if evaluate_name:
            out["evaluateName"] = evaluate_name
        kids = expandable(value, evaluate_name, self.writer_for(value))
        if kids is not None:
            out["variablesReference"] = self.handles.add(kids)
            named, indexed = kids.counts()
            out.update({k: n for k, n in (("namedVariables", named), ("indexedVariables", indexed)) if n})
        return out

    def writer_for(self, value: Any) -> Any:
        return None

    def stop_variables(self, args: dict[str, Any]) -> dict[str, Any]:
        kids = self.handles.get(args.get("variablesReference"))
        if not hasattr(kids, "children"):
            raise DapError(f"reference {args.get('variablesReference')!r} is a frame, not variables")
        flt = args.get("filter") if args.get("filter") in ("named", "indexed") else None
        start, count = _int(args.get("start"), 0), _int(args.get("count"), 0) or None
        if flt is None and (start or count):   # start/count over the whole list: named children, then rows
            children = _page_all(kids, start, count)
        elif flt is None and not self.paging and hasattr(kids, "grouped"):   # every row reachable without paging
            children = kids.grouped()
        else:
            children = kids.children(flt, start, count)
        return {"variables": [self.variable(c.name, c.value, c.evaluate_name) for c in children]}

    def stop_disassemble(self, args: dict[str, Any]) -> dict[str, Any]:
        raise DapError("disassemble works at a stop in Dynamo's bytecode (dynstep run --step-bytecode --dap); "
                       "a compiled graph's listing is the frame's source")

    def stop_evaluate(self, args: dict[str, Any]) -> dict[str, Any]:
        """An expression in a Python frame of the stop, or at the stop itself (`evaluate_here`)."""
        expr = args.get("expression")
        if not isinstance(expr, str):
            raise DapError("evaluate needs an expression (a string)")
        frame = self.frame(args.get("frameId"))
        if isinstance(frame, PyFrame):
            return self.evaluated(expr, self.eval_python(frame, expr))
        return self.evaluate_here(expr, args)

    def evaluate_here(self, expr: str, args: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def frame(self, frame_id: Any) -> Any:
        if frame_id is None:
            return NodeFrame()
        return self.handles.get(frame_id, (NodeFrame, PyFrame))

    def python_scopes(self, frame: PyFrame) -> dict[str, Any]:
        ref = self.handles.add(MappingChildren(dict(frame.frame.f_locals)))
        return {"scopes": [{"name": "Locals", "presentationHint": "locals", "variablesReference": ref,
                            "expensive": False}]}

    def eval_python(self, frame: PyFrame, expr: str) -> Any:
        try:
            return eval(compile(expr, "<dap>", "eval"), frame.frame.f_globals, dict(frame.frame.f_locals))
        except Exception as exc:
            raise DapError(f"{type(exc).__name__}: {exc}") from None

    def evaluated(self, expr: str, value: Any) -> dict[str, Any]:
        var = self.variable("", value, expr if expr.replace(".", "").replace("_", "").isalnum() else "")
        body = {"result": var["value"], "type": var["type"], "variablesReference": var["variablesReference"]}
        body.update({k: var[k] for k in ("namedVariables", "indexedVariables") if k in var})
        return body


class StopView(View):
    """A runtime stop of the stepper (pause, breakpoint, step, interrupt, NaN)."""

    def __init__(self, stepper: Stepper, stop: Stop, sources: Sources, py_frames: list[types.FrameType]) -> None:
        super().__init__(sources, py_frames)
        self.stepper, self.stop = stepper, stop

    def build_frames(self) -> list[dict[str, Any]]:
        site, frames = self.stop.site, []
        graph = self.sources.graph(site.graph, site.node)
        if graph is not None:
            ref, line, name = graph
            frames.append({"id": self.handles.add(NodeFrame()), "name": f"{site.node} = {site.target} [{site.graph}]",
                           "line": line, "column": 1, "presentationHint": "normal",
                           "source": {"name": name, "sourceReference": ref, "origin": "compiled graph"}})
        locations = stack_locations(self.stop)
        root = root_frame(locations[-1], self.py_frames) if locations else None
        for i, location in enumerate(locations):
            file, lineno = location.file, location.line
            text = linecache.getline(file, lineno).strip() or str(location)
            label = f"{site.module or '<top>'}: {text}" if i == 0 else text
            outermost = i == len(locations) - 1
            frame = NodeFrame(level=i, py=root if outermost else None, outermost=outermost)
            frames.append({"id": self.handles.add(frame), "name": label, "line": lineno, "column": 1,
                           "source": {"name": os.path.basename(file), "path": os.path.abspath(file)}})
        return frames + self.py_frame_bodies([f for f in self.py_frames if f is not root])

    def stop_scopes(self, args: dict[str, Any]) -> dict[str, Any]:
        frame = self.frame(args.get("frameId"))
        if isinstance(frame, PyFrame):
            return self.python_scopes(frame)
        stop, site = self.stop, self.stop.site
        node = {"value": stop.value, **{n: stop.value for n in stop.names() if n != "value"}, **stop.inputs}
        here = []
        if frame.level >= 0:   # a user frame: the other names `evaluate` in it sees (its real locals)
            names = {k: v for k, v in frame_names(self.stepper, stop, frame).items()
                     if k != "torch" and k not in node and k not in self.stepper.user_vars}
            here = [("This frame", None, MappingChildren(names))] if names else []
        info = {"node": site.node, "op": site.target, "module": site.module, "source": site.source,
                "graph": site.graph, "call": stop.call, "reason": stop.reason,
                "writable": stop.writable, **({"note": stop.note} if stop.note else {})}
        scopes = [("Node", "locals", MappingChildren(node, setter=self._set_node)), *here,
                  ("Site", None, MappingChildren(info))]
        if self.stepper.user_vars:
            scopes.append(("Bound in the debugger", None, MappingChildren(dict(self.stepper.user_vars))))
        return {"scopes": [{"name": name, "variablesReference": self.handles.add(kids), "expensive": False,
                            **({"presentationHint": hint} if hint else {})} for name, hint, kids in scopes]}

    def writer_for(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return None
        roots = ([self.stop.value] if self.stop.writable else []) + \
            [self.stop.inputs[n] for n in self.stop.writable_inputs if n in self.stop.inputs]
        if any(_same_storage(value, r) for r in roots):
            return self.stepper.write_tensor
        return None

    def _set_node(self, name: str, expr: str) -> Any:
        self._run_set(name, expr)
        return self.stop.value if name in self.stop.names() else self.stop.inputs.get(name)

    def _run_set(self, name: str, expr: str) -> None:
        """What `set NAME = EXPR` does, called with the name and the evaluated value (no command line in
        between): its answer goes to the client as output, its refusal is the error."""
        try:
            self.stepper.assign(name, self.stepper.evaluate(expr))
        except ValueError as exc:
            raise DapError(str(exc)) from None
        except Exception as exc:
            raise DapError(f"{type(exc).__name__}: {exc}") from None

    def stop_setVariable(self, args: dict[str, Any]) -> dict[str, Any]:
        kids = self.handles.get(args.get("variablesReference"))
        name, expr = args.get("name"), args.get("value")
        if not isinstance(name, str) or not isinstance(expr, str):
            raise DapError("setVariable needs a name and a value (strings)")
        if isinstance(kids, MappingChildren) and kids.setter == self._set_node:
            value = kids.set(name, expr)
        else:
            value = kids.set(name, self.evaluate(expr))
        var = self.variable(name, value)
        return {k: var[k] for k in ("value", "type", "variablesReference", "namedVariables", "indexedVariables")
                if k in var}

    def stop_setExpression(self, args: dict[str, Any]) -> dict[str, Any]:
        expr, value_text = args.get("expression"), args.get("value")
        if not isinstance(expr, str) or not isinstance(value_text, str):
            raise DapError("setExpression needs an expression and a value (strings)")
        expr = expr.strip()
        if expr.isidentifier():
            value = self._set_node(expr, value_text)
        else:
            target = self.evaluate(expr)
            writer = self.writer_for(target)
            if writer is None:
                raise DapError(f"{expr} is not a part of a value this stop may write (only the stopped value, "
                               "a view of it, or a breakpoint's writable locals)")
            try:
                writer(target, self.evaluate(value_text), expr)
            except ValueError as exc:
                raise DapError(str(exc)) from None
            value = target
        body = self.evaluated(expr, value)
        return {"value": body["result"], **{k: v for k, v in body.items() if k != "result"}}

    def evaluate(self, expr: str) -> Any:
        try:
            return self.stepper.evaluate(expr)
        except Exception as exc:
            raise DapError(f"{type(exc).__name__}: {exc}") from None

    def evaluate_here(self, expr: str, args: dict[str, Any]) -> dict[str, Any]:
        """At the node: a dynstep command typed in the console, else an expression like `p`'s; in a
        user frame, in that frame's names (userframes.frame_names)."""
        if args.get("context") in ("repl", None) and _is_command(expr):
            return {"result": self.command(expr), "variablesReference": 0}
        frame = self.frame(args.get("frameId"))
        if frame.level < 0:
            return self.evaluated(expr, self.evaluate(expr))
        names = frame_names(self.stepper, self.stop, frame)
        try:
            value = eval(compile(expr, "<dap>", "eval"), {"__builtins__": __builtins__}, names)
        except NameError as exc:
            raise DapError(unavailable(getattr(exc, "name", None) or str(exc), frame, names)) from None
        except Exception as exc:
            raise DapError(f"{type(exc).__name__}: {exc}") from None
        return self.evaluated(expr, value)

    def command(self, line: str) -> str:
        """A dynstep command typed in the debug console (set, record, graph, where, break, help, ...)."""
        if line.split()[0] in RESUME_COMMANDS:
            raise DapError(f"{line.split()[0]!r} resumes the program: use the debugger's continue/step buttons")
        texts: list[str] = []
        with use_sink(lambda e: texts.append(event_text(e) or "")):
            self.stepper.execute(line)
        return "\n".join(t for t in texts if t)

    def stop_exceptionInfo(self, args: dict[str, Any]) -> dict[str, Any]:
        stop = self.stop
        if stop.reason != "nan":
            raise DapError("this stop is not an exception stop")
        site = stop.site
        return {"exceptionId": "NonFiniteError", "description": stop.note, "breakMode": "always",
                "details": {"message": stop.note, "typeName": "dynstep.NonFiniteError",
                            "evaluateName": "value",
                            "stackTrace": f"node {site.node} ({site.target}) in {site.graph}, module "
                                          f"{site.module or '<top>'}, {site.source or 'no source line'}"}}


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False


COMMAND_WORDS = NODE_STOP.words({"set", "record", "where", "graph", "help", "break", "clear", "watch",
                                 "ranks"}) | RESUME_COMMANDS
_TO_RANK = re.compile(r"^[a-z]+@[0-9]+$")   # p@1, set@0: a command for another rank (distributed runs)


def _is_command(text: str) -> bool:
    """A dynstep command line rather than a Python expression: `set value = 0`, `record`, `g`, `b op:mm`."""
    words = text.split()
    if words and _TO_RANK.match(words[0]):
        return True
    if not words or words[0] not in COMMAND_WORDS:
        return False
    if len(words) == 1:
        return True
    try:
        compile(text, "<dap>", "eval")
    except SyntaxError:
        return True
    return False


def _page_all(kids: Any, start: int, count: int | None) -> list[Any]:
    """start/count without a filter: a page of the named children followed by the indexed ones."""
    named = kids.children("named", 0, None)
    picked = named[start:start + count] if count else named[start:]
    left = None if count is None else count - len(picked)
    if left is None or left > 0:
        picked += kids.children("indexed", max(0, start - len(named)), left)
    return picked


def _int(value: Any, default: int) -> int:
    return value if type(value) is int and value >= 0 else default
