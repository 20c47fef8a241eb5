"""Which user line wrote each side effect Dynamo replays after the graph.

Dynamo replays mutations of Python objects (``d["y"] = ...``, ``log.append(...)``,
``self.count += 1``) after calling the graph, in code it writes itself: ``d.update({'y': ...,
'n': 3})``, ``log[:] = [...]``, ``self.count = ...``. Those instructions carry the function's
``def`` line. This module finds, for each of them, the line of the user's own code (the original
code object Dynamo transformed) that wrote the same object (and the same key, when both name one):

    replay_lines(info, original)      -> {row index: user line}

Both sides are read from the instructions' shape (what loads the object an instruction mutates,
found through the value-stack depth before each instruction), as the stepper's "replay" marks are:
a reading aid. An object nobody can name (a temporary, an object built by an expression) keeps
the line Dynamo gave it.
"""

from __future__ import annotations

import dataclasses
import dis
import types

from .code import _RESUME, CodeInfo, _stack_depths

_LOADS = {"LOAD_FAST", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST_CHECK", "LOAD_CLOSURE"}
_METHODS = {"update", "append", "extend", "insert", "pop", "clear", "add", "remove", "setdefault", "discard",
            "popitem", "sort", "reverse", "__setitem__", "__delitem__", "__setattr__"}


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One instruction that changes a named object: ``d`` (keys ``('y',)``) at instruction `index`."""

    index: int
    target: str
    keys: tuple[str, ...]
    line: int | None


def mutations(code: types.CodeType) -> list[Mutation]:
    """Every instruction of `code` that writes into an object it loaded by name."""
    instructions = list(dis.get_instructions(code))
    depths = _stack_depths(code, instructions)
    out = []
    line = None
    for i, inst in enumerate(instructions):
        line = _line_of(inst, line)
        slot = _mutated_slot(inst, depths.get(inst.offset))
        if slot is None:
            continue
        target = _producer_name(instructions, depths, i, slot)
        if target:
            out.append(Mutation(i, target, _keys(instructions, depths, i, slot), line))
    return out


def _line_of(inst: dis.Instruction, last: int | None) -> int | None:
    if inst.starts_line is not None and not isinstance(inst.starts_line, bool):
        return inst.starts_line
    return getattr(inst, "line_number", None) or last


def _mutated_slot(inst: dis.Instruction, depth: int | None) -> int | None:
    """The stack slot holding the object `inst` mutates (None: it mutates nothing by name)."""
    if depth is None:
        return None
    if inst.opname in ("STORE_SUBSCR", "DELETE_SUBSCR"):
        return depth - 2
    if inst.opname in ("STORE_ATTR", "DELETE_ATTR"):
        return depth - 1
    if inst.opname in ("LOAD_METHOD", "LOAD_ATTR") and inst.argval in _METHODS:
        return depth - 1
    return None


def _producer(instructions: list[dis.Instruction], depths: dict[int, int], i: int, slot: int) -> int | None:
    """The instruction that pushed the value now in `slot` before instruction `i` (straight-line code)."""
    for j in range(i - 1, -1, -1):
        inst = instructions[j]
        before, after = depths.get(inst.offset), depths.get(instructions[j + 1].offset)
        if before is None or after is None:
            return None
        if before <= slot:           # the slot did not exist before j: j made it
            return j if after > slot else None
        if _lowest_touched(inst, before, after) <= slot:
            return j if inst.opname != "COPY" and after > slot else None
    return None


def _lowest_touched(inst: dis.Instruction, before: int, after: int) -> int:
    """The lowest stack slot `inst` may replace (it pops down to it, or swaps it)."""
    arg = inst.arg or 0
    if inst.opname in _LOADS or inst.opname in ("LOAD_CONST", "PUSH_NULL", "COPY", "NOP", "CACHE", "EXTENDED_ARG",
                                                "DELETE_FAST", "PRECALL", "RESUME", "KW_NAMES"):
        return before
    if inst.opname == "SWAP":
        return before - arg
    if inst.opname in ("LIST_EXTEND", "LIST_APPEND", "SET_ADD", "SET_UPDATE", "DICT_UPDATE", "DICT_MERGE", "MAP_ADD"):
        return before - 1    # the container below keeps its identity
    return min(before, after) - 1 if after <= before else before


def _producer_name(instructions: list[dis.Instruction], depths: dict[int, int], i: int, slot: int) -> str:
    j = _producer(instructions, depths, i, slot)
    if j is None or instructions[j].opname not in _LOADS:
        return ""
    return str(instructions[j].argval)


def _keys(instructions: list[dis.Instruction], depths: dict[int, int], i: int, slot: int) -> tuple[str, ...]:
    """The keys or attribute names written: a constant subscript, an attribute, a dict literal's keys."""
    inst = instructions[i]
    if inst.opname in ("STORE_ATTR", "DELETE_ATTR"):
        return (str(inst.argval),)
    if inst.opname in ("STORE_SUBSCR", "DELETE_SUBSCR"):
        j = _producer(instructions, depths, i, slot + 1)
        key = instructions[j] if j is not None else None
        return (str(key.argval),) if key is not None and key.opname == "LOAD_CONST" else ()
    keys = []   # a method call: the string constants of its arguments, up to the call that consumes the object
    for later in instructions[i + 1:]:
        depth = depths.get(later.offset)
        if depth is None or depth <= slot:
            break
        if later.opname == "LOAD_CONST" and isinstance(later.argval, str):
            keys.append(later.argval)
    return tuple(keys)


def replay_lines(info: CodeInfo, original: types.CodeType | None) -> dict[int, int]:
    """{index of a side-effect row of `info`: the user line that wrote that object} (see the module docstring)."""
    if original is None:
        return {}
    low, high = _traced_lines(info)
    written = [w for w in mutations(original) if w.line is not None and low <= w.line <= high]
    out = {}
    for m in mutations(info.code):
        if not info.rows[m.index].side_effect:
            continue
        same = [w for w in written if w.target == m.target]
        keyed = [w for w in same if set(w.keys) & set(m.keys)]
        chosen = keyed or same
        if chosen:
            out[m.index] = min(w.line for w in chosen if w.line is not None)
    return out


def _traced_lines(info: CodeInfo) -> tuple[int, int]:
    """The user lines whose effects this code replays: up to its graph break (the transformed function),
    from the line it resumes after (a resume function, which also holds the code before it)."""
    match = _RESUME.match(info.code.co_name)
    if match:
        return int(match.group("line")), 1 << 30
    breaks = [r.line for r in info.rows if r.region == "graph break" and r.line is not None]
    return 0, (breaks[0] if breaks else 1 << 30)
