"""The DAP side of a stop in Dynamo's bytecode (`dynstep run --step-bytecode --dap`, `step_bytecode()`).

Frames: the instruction in a listing of the code object Dynamo produced (a virtual source, one line
per instruction, with its offset, region and the user's line), then the Python frames (the
transformed function itself on the user's line, and its callers). The stack frame carries an
`instructionPointerReference`, so VS Code's disassembly view works: `disassemble` answers with the
code object's instructions. Scopes: the frame's locals and its real value stack.

Stepping (`BYTECODE_STOP` in dynstep/core/command_table.py maps it): stepIn and next with
instruction granularity run one instruction (at the graph call: into the graph, node by node); next
runs to the next line or part of Dynamo's output; continue and stepOut run on.
"""

from __future__ import annotations

import os
import types
from typing import Any

from .. import _compat
from ..bytecode.code import CodeInfo, Row
from ..bytecode.stepper import BytecodeStepper
from .protocol import DapError
from .sources import Sources, virtual_name
from .stopview import NodeFrame, PyFrame, View
from .variables import MappingChildren

HEADER_LINES = 2


class BytecodeStopView(View):
    def __init__(self, stepper: BytecodeStepper, sources: Sources, py_frames: list[types.FrameType]) -> None:
        super().__init__(sources, py_frames)
        assert stepper.current is not None
        self.stepper, self.here = stepper, stepper.current
        self.codes: dict[str, CodeInfo] = {_code_key(self.here.info.code): self.here.info}

    def _listing(self, info: CodeInfo) -> dict[str, Any]:
        lines = [f"# {info.title}: the bytecode Dynamo produced, one line per instruction",
                 "# offset  instruction    # region · user's line"]
        lines += [f"{r.offset:6d}  {r.text():<40} # {r.region}{f' · line {r.line}' if r.line else ''}"
                  f"{' · side effect' if r.side_effect else ''}" for r in info.rows]
        name = virtual_name(info.code.co_name, "bytecode")
        ref = self.sources.add(f"bytecode:{_code_key(info.code)}", name, "\n".join(lines) + "\n")
        return {"name": name, "sourceReference": ref, "origin": "Dynamo-produced bytecode"}

    def build_frames(self) -> list[dict[str, Any]]:
        info, row = self.here.info, self.here.row
        top = {"id": self.handles.add(NodeFrame()), "name": f"{row.text()}   [{info.title}]",
               "line": row.index + HEADER_LINES + 1, "column": 1, "source": self._listing(info),
               "instructionPointerReference": _address(info, row)}
        frames = [top]
        for body, frame in zip(self.py_frame_bodies(), self.py_frames):
            if frame is self.here.frame and row.line:
                body["line"] = row.line   # the user's line Dynamo attributed to the instruction
            frames.append(body)
        return frames

    def _frame(self, frame_id: Any) -> types.FrameType:
        frame = self.frame(frame_id)
        return frame.frame if isinstance(frame, PyFrame) else self.here.frame

    def stop_scopes(self, args: dict[str, Any]) -> dict[str, Any]:
        frame = self._frame(args.get("frameId"))
        scopes = [("Locals", "locals", MappingChildren(dict(frame.f_locals)))]
        if frame is self.here.frame and self.here.row.depth:
            try:
                stack = _compat.frame_value_stack(frame, self.here.row.depth)
            except Exception as exc:   # a frame torch cannot read: say so in the scope
                stack = [f"<value stack not readable: {type(exc).__name__}: {exc}>"]
            scopes.append(("Value stack", None, MappingChildren({f"[{i}]": v for i, v in enumerate(stack)})))
        info = {"code": self.here.info.title, "instruction": self.here.row.text(), "offset": self.here.row.offset,
                "region": self.here.row.region, "reason": self.stepper.stop_reason,
                **({"note": self.stepper.stop_note} if self.stepper.stop_note else {})}
        scopes.append(("Instruction", None, MappingChildren(info)))
        return {"scopes": [{"name": name, "variablesReference": self.handles.add(kids), "expensive": False,
                            **({"presentationHint": hint} if hint else {})} for name, hint, kids in scopes]}

    def stop_evaluate(self, args: dict[str, Any]) -> dict[str, Any]:
        expr = args.get("expression")
        if not isinstance(expr, str):
            raise DapError("evaluate needs an expression (a string)")
        return self.evaluated(expr, self.eval_python(PyFrame(self._frame(args.get("frameId"))), expr))

    def stop_setVariable(self, args: dict[str, Any]) -> dict[str, Any]:
        raise DapError("values cannot be changed at a bytecode stop; step into the graph call and set them "
                       "at a node")

    stop_setExpression = stop_setVariable

    def stop_exceptionInfo(self, args: dict[str, Any]) -> dict[str, Any]:
        exc = self.stepper.exception
        if exc is None:
            raise DapError("this bytecode stop is not an exception stop")
        return {"exceptionId": type(exc).__name__, "description": str(exc), "breakMode": "always"}

    def stop_disassemble(self, args: dict[str, Any]) -> dict[str, Any]:
        key, _, offset = str(args.get("memoryReference", "")).partition("@")
        info = self.codes.get(key)
        if info is None or not offset.isdigit():
            raise DapError(f"no code object at {args.get('memoryReference')!r} (references come from a stack frame's "
                           "instructionPointerReference)")
        base = info.index_of.get(int(offset), 0)
        start = base + _int(args.get("instructionOffset")) + _int(args.get("offset"))
        count = max(0, _int(args.get("instructionCount")))
        source = {"name": os.path.basename(info.code.co_filename), "path": os.path.abspath(info.code.co_filename)}
        out = []
        for i in range(start, start + count):   # DAP wants exactly `count`: pad with invalid ones outside
            if 0 <= i < len(info.rows):
                row = info.rows[i]
                item = {"address": _address(info, row), "instruction": row.text(), "symbol": info.code.co_name}
                if row.line:
                    item.update(location=source, line=row.line)
            else:
                item = {"address": f"{key}@-{i}" if i < 0 else f"{key}@end+{i}", "instruction": "",
                        "presentationHint": "invalid"}
            out.append(item)
        return {"instructions": out}


def _code_key(code: types.CodeType) -> str:
    return f"{code.co_name}-{id(code):x}"


def _address(info: CodeInfo, row: Row) -> str:
    return f"{_code_key(info.code)}@{row.offset}"


def _int(value: Any) -> int:
    return value if type(value) is int else 0
