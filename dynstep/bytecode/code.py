"""What a Dynamo-produced code object is made of, worked out once per code object.

The bytecode stepper (`dynstep.bytecode`) needs, for every instruction of a code object Dynamo
wrote: its index, the value-stack depth before it runs (to read the real stack), the user's
source line it stands for, and the part of Dynamo's output it belongs to:

    prologue     before the graph is called
    graph call   loading and calling ``__compiled_fn_*`` (the compiled FX graph)
    replay       after the graph: unpacking its outputs and replaying side effects on Python
                 objects (``d.update(...)``, ``log[:] = ...``, attribute stores)
    graph break  the user's own instruction Dynamo could not trace (it runs as plain Python)
    resume       building the arguments of, and calling, ``__resume_at_*`` (the rest of the function)

    info = analyse(code)
    info.rows[info.index_of[offset]].region     # "graph call"
    describe_code(code)                         # "resume of f after line 9"
"""

from __future__ import annotations

import dataclasses
import dis
import re
import types

_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)
_NO_FALLTHROUGH = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD",
                   "JUMP_BACKWARD", "JUMP_ABSOLUTE", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP"}
_CALLS = {"CALL", "CALL_FUNCTION", "CALL_FUNCTION_EX", "CALL_KW", "CALL_METHOD", "PRECALL"}
# LIST_EXTEND and friends are left out: Dynamo uses them on its own temporaries as well
_REPLAY_OPS = {"STORE_SUBSCR", "DELETE_SUBSCR", "STORE_ATTR", "DELETE_ATTR"}
_REPLAY_METHODS = {"update", "append", "extend", "insert", "pop", "clear", "add", "remove", "setdefault",
                   "__setitem__", "__delitem__", "__setattr__"}


@dataclasses.dataclass(frozen=True)
class Row:
    """One instruction as the stepper shows it."""

    index: int
    offset: int
    opname: str
    argrepr: str
    line: int | None          # the user's source line Dynamo attributed to this instruction
    depth: int | None         # value-stack depth before the instruction (None: not worked out)
    region: str
    side_effect: bool         # this instruction replays a side effect on a Python object

    def text(self) -> str:
        return f"{self.opname} {self.argrepr}".rstrip()


@dataclasses.dataclass(frozen=True)
class CodeInfo:
    code: types.CodeType
    rows: tuple[Row, ...]
    index_of: dict[int, int]          # every byte offset inside an instruction (caches too) -> index
    graph_calls: frozenset[int]       # offsets of the CALL/PRECALL that call a compiled graph
    kind: str                         # "transformed" | "resume"
    title: str                        # "f (transformed by Dynamo)" | "resume of f after line 9"

    def row_at(self, offset: int) -> Row | None:
        index = self.index_of.get(offset)
        return None if index is None else self.rows[index]

    def with_lines(self, lines: dict[int, int]) -> "CodeInfo":
        """The same code, the rows at these indexes attributed to other user lines (side-effect replay)."""
        if not lines:
            return self
        rows = tuple(dataclasses.replace(r, line=lines[r.index]) if r.index in lines else r for r in self.rows)
        return dataclasses.replace(self, rows=rows)

    def first_of_line(self, line: int) -> Row | None:
        # RESUME/NOP never get an instruction event (settrace reports RESUME as the call itself)
        return next((r for r in self.rows if r.line == line and r.opname not in ("RESUME", "NOP", "CACHE")), None)


def describe_code(code: types.CodeType) -> tuple[str, str]:
    """(kind, title) of a code object Dynamo produced: the function it stands for, and where."""
    m = _RESUME.match(code.co_name)
    if m:
        return "resume", f"resume of {m.group('fn')} after line {m.group('line')}"
    return "transformed", f"{code.co_name} (transformed by Dynamo)"


def resume_title(global_name: str, callee: types.CodeType | None) -> str:
    """``__resume_at_30_1`` -> "resume of f after line N" when the callee's code is known."""
    if callee is not None:
        return describe_code(callee)[1]
    m = re.match(r"__resume_at_(\d+)_(\d+)", global_name)
    return f"resume at original bytecode offset {m.group(1)}" if m else global_name


def analyse(code: types.CodeType) -> CodeInfo:
    instructions = list(dis.get_instructions(code))
    depths = _stack_depths(code, instructions)
    lines = _lines(instructions)
    graph_calls = _graph_calls(instructions, depths)
    regions = _regions(instructions, graph_calls, lines, code)
    rows, index_of = [], {}
    next_offsets = [i.offset for i in instructions[1:]] + [len(code.co_code)]
    for i, (inst, end) in enumerate(zip(instructions, next_offsets)):
        side = inst.opname in _REPLAY_OPS or (inst.opname in ("LOAD_METHOD", "LOAD_ATTR")
                                              and inst.argval in _REPLAY_METHODS)
        argrepr = inst.argrepr or ("" if inst.arg is None or inst.opcode < dis.HAVE_ARGUMENT else str(inst.arg))
        depth = depths.get(inst.offset)
        if inst.opname == "CALL" and depth is not None and i and instructions[i - 1].opname == "PRECALL":
            # 3.11: dis books the arguments' pop on PRECALL, but they stay on the stack until CALL
            depth += instructions[i - 1].arg or 0
        rows.append(Row(index=i, offset=inst.offset, opname=inst.opname, argrepr=argrepr, line=lines[i],
                        depth=depth, region=regions[i],
                        side_effect=side and regions[i] == "replay"))
        for off in range(inst.offset, end, 2):
            index_of[off] = i
    kind, title = describe_code(code)
    return CodeInfo(code=code, rows=tuple(rows), index_of=index_of, graph_calls=frozenset(graph_calls),
                    kind=kind, title=title)


def _lines(instructions: list[dis.Instruction]) -> list[int | None]:
    out, line = [], None
    for inst in instructions:
        if inst.starts_line is not None and not isinstance(inst.starts_line, bool):
            line = inst.starts_line
        elif getattr(inst, "line_number", None) is not None:   # Python 3.13: starts_line is a bool
            line = inst.line_number
        out.append(line)
    return out


def _effect(inst: dis.Instruction, jump: bool) -> int:
    arg = inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None
    return dis.stack_effect(inst.opcode, arg, jump=jump)


def _stack_depths(code: types.CodeType, instructions: list[dis.Instruction]) -> dict[int, int]:
    """Depth before each instruction, by walking every path (fall-through, jumps, exception handlers)."""
    by_offset = {inst.offset: i for i, inst in enumerate(instructions)}
    depths: dict[int, int] = {}
    work = [(0, 0)]
    for entry in _exception_entries(code):
        work.append((by_offset.get(entry[0], -1), entry[1]))
    while work:
        i, depth = work.pop()
        while 0 <= i < len(instructions):
            inst = instructions[i]
            if inst.offset in depths:
                break
            depths[inst.offset] = depth
            try:
                if inst.opcode in _JUMPS and isinstance(inst.argval, int) and inst.argval in by_offset:
                    work.append((by_offset[inst.argval], depth + _effect(inst, True)))
                if inst.opname in _NO_FALLTHROUGH:
                    break
                depth += _effect(inst, False)
            except ValueError:   # an opcode dis cannot size: stop this path, the rest stays unknown
                break
            i += 1
    return depths


def _exception_entries(code: types.CodeType) -> list[tuple[int, int]]:
    """(handler offset, stack depth at the handler) from the 3.11+ exception table."""
    parse = getattr(dis, "_parse_exception_table", None)
    if parse is None:
        return []
    try:
        return [(e.target, e.depth + (1 if e.lasti else 0) + 1) for e in parse(code)]
    except Exception:   # a private helper whose shape changed: handlers just stay unknown
        return []


def _graph_calls(instructions: list[dis.Instruction], depths: dict[int, int]) -> set[int]:
    """The CALL (and its PRECALL) that consumes each ``LOAD_GLOBAL __compiled_fn_*``."""
    out: set[int] = set()
    for i, inst in enumerate(instructions):
        if inst.opname != "LOAD_GLOBAL" or not str(inst.argval).startswith("__compiled_fn"):
            continue
        base = depths.get(inst.offset)
        if base is None:
            continue
        precall = False
        for later in instructions[i + 1:]:
            d = depths.get(later.offset)
            if later.opname == "CALL" and precall:   # 3.11: PRECALL already took the arguments
                out.add(later.offset)
                break
            if later.opname in ("PRECALL", "CALL") and d is not None and later.arg is not None \
                    and d - later.arg - 2 == base:
                out.add(later.offset)
                if later.opname == "CALL":
                    break
                precall = True
    return out


def _regions(instructions: list[dis.Instruction], graph_calls: set[int], lines: list[int | None],
             code: types.CodeType) -> list[str]:
    start = next((i for i, inst in enumerate(instructions) if inst.opname == "LOAD_GLOBAL"
                  and str(inst.argval).startswith("__compiled_fn")), None)
    end = max((i for i, inst in enumerate(instructions) if inst.offset in graph_calls), default=None)
    resume = next((i for i, inst in enumerate(instructions) if inst.opname == "LOAD_GLOBAL"
                   and str(inst.argval).startswith("__resume_at")), None)
    # the graph-break instruction: the first call after the graph whose line differs from the
    # function's first line (Dynamo keeps the user's line number on the instruction it left alone)
    breaks = None
    after = (end + 1) if end is not None else 0
    for i in range(after, resume if resume is not None else len(instructions)):
        if instructions[i].opname in _CALLS and lines[i] not in (None, code.co_firstlineno) \
                and instructions[i].starts_line:
            breaks = i
            break
    out = []
    for i in range(len(instructions)):
        if start is not None and end is not None and start <= i <= end:
            out.append("graph call")
        elif end is None or i < (start or 0):
            out.append("prologue" if resume is None or i < resume else "resume")
        elif breaks is not None and i == breaks:
            out.append("graph break")
        elif resume is not None and i >= resume:
            out.append("resume")
        elif breaks is not None and i > breaks:
            out.append("resume")      # rebuilding the stack and locals the resume function takes
        else:
            out.append("replay")
    return out


@dataclasses.dataclass
class Here:
    """Where the program is stopped: the frame, its code's analysis and the next instruction."""

    frame: types.FrameType
    info: CodeInfo
    row: Row


def live_depth_in_call(code: types.CodeType, offset: int, depth: int) -> int:
    """How many of the `depth` slots before the instruction at `offset` still hold live values while
    the frame waits in a call that instruction made (a frame further out than where the program
    stopped: CPython saved no stack pointer for it, so the slots are read by the static depth).

    CALL_FUNCTION_EX pops its argument sequence (and keyword mapping) before calling and, when they are
    not an exact tuple (dict), replaces them with new ones and frees the originals: the slots that held
    them point at freed memory during the call (reading them corrupted the heap on CPython 3.11). Those
    slots are left out; every other instruction keeps its operands alive until its call returns."""
    raw = code.co_code
    if offset < 0 or offset + 1 >= len(raw) or dis.opname[raw[offset]] != "CALL_FUNCTION_EX":
        return depth
    return max(0, depth - 1 - (raw[offset + 1] & 1))
