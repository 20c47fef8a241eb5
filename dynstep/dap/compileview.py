"""The DAP side of `dynstep.breakpoint()`'s compile-time stop (stopped reason "compile-time").

Frames: the breakpoint's line; "graph so far" and "guards" as virtual sources; the Python frames
of the user's code that was being compiled. Scopes: the symbolic locals (FakeTensor shapes,
symbolic sizes, constants), the guards, and the compile (id, recompile reason, graph breaks).
`evaluate` sees the fake tensors by their local names (``h.shape``).
"""

from __future__ import annotations

import os
import types
from typing import Any

from ..step.compile_stop import CompileStop
from .protocol import DapError
from .sources import Sources, virtual_name
from .stopview import NodeFrame, PyFrame, View
from .variables import MappingChildren


class CompileStopView(View):
    def __init__(self, stop: CompileStop, fakes: dict[str, Any], sources: Sources,
                 py_frames: list[types.FrameType]) -> None:
        super().__init__(sources, py_frames)
        self.stop, self.fakes = stop, fakes

    def _virtual(self, kind: str, text: str) -> dict[str, Any]:
        label = f"{self.stop.function}[{self.stop.compile_id}]"
        name = virtual_name(label, kind)
        ref = self.sources.add(f"{kind}:{label}:{self.stop.line}:{self.stop.occurrence}", name, text)
        return {"name": name, "sourceReference": ref, "origin": "dynstep compile-time stop"}

    def build_frames(self) -> list[dict[str, Any]]:
        s = self.stop
        guards = "\n".join([*s.guards, *(f"shape: {g}" for g in s.shape_guards)]) or "(no guards yet)"
        frames = [
            {"id": self.handles.add(NodeFrame()), "name": f"{s.function} · compile {s.compile_id}", "line": s.line,
             "column": 1, "source": {"name": os.path.basename(s.file), "path": s.file}},
            {"id": self.handles.add(NodeFrame()), "name": "graph so far", "line": 1, "column": 1,
             "source": self._virtual("graph_so_far", s.graph.strip("\n") + "\n")},
            {"id": self.handles.add(NodeFrame()), "name": "guards", "line": 1, "column": 1,
             "source": self._virtual("guards", guards + "\n")},
        ]
        return frames + self.py_frame_bodies()

    def stop_scopes(self, args: dict[str, Any]) -> dict[str, Any]:
        frame = self.frame(args.get("frameId"))
        if isinstance(frame, PyFrame):
            return self.python_scopes(frame)
        s = self.stop
        locals_ = {x.name: x.text for x in s.locals}
        guards = {f"[{i}]": g for i, g in enumerate([*s.guards, *(f"shape: {g}" for g in s.shape_guards)])}
        compile_info = {"compile_id": s.compile_id, "recompile_reason": s.recompile_reason or "",
                        "graph_breaks": list(s.graph_breaks), "inlined frames": list(s.backtrace)}
        scopes = [("Symbolic locals", "locals", locals_), ("Guards", None, guards), ("Compile", None, compile_info)]
        return {"scopes": [{"name": name, "variablesReference": self.handles.add(MappingChildren(items)),
                            "expensive": False, **({"presentationHint": hint} if hint else {})}
                           for name, hint, items in scopes]}

    def evaluate_here(self, expr: str, args: dict[str, Any]) -> dict[str, Any]:
        """At the compile-time stop: a symbolic local's text, or an expression over FakeTensors."""
        texts = {x.name: x.text for x in self.stop.locals}
        if expr.strip() in texts and expr.strip() not in self.fakes:
            return {"result": texts[expr.strip()], "variablesReference": 0}
        try:
            value = eval(compile(expr, "<dap>", "eval"), {"__builtins__": __builtins__}, dict(self.fakes))
        except Exception as exc:
            raise DapError(f"{type(exc).__name__}: {exc} (at a compile-time stop tensors are FakeTensors: "
                           "shape, dtype, device and strides are known, values are not)") from None
        return self.evaluated(expr, value)

    def stop_setVariable(self, args: dict[str, Any]) -> dict[str, Any]:
        raise DapError("nothing can be changed at a compile-time stop (values do not exist yet); continue to "
                       "the runtime stop at the same line")

    stop_setExpression = stop_setVariable

    def stop_exceptionInfo(self, args: dict[str, Any]) -> dict[str, Any]:
        raise DapError("a compile-time stop is not an exception stop")
