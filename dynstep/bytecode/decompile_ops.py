"""The decompiler's symbolic value stack, and its handlers for loads, stack shuffles and calls.

`Machine.step(inst)` runs ``op_<OPNAME>`` (`dynstep.bytecode.decompile_values` adds the handlers that
build values, store and return); an opcode without a handler is a `DecompileError` naming it.
Values are `Expr`s (Python text, precedence, the names they read, the instructions that made
them); statements are appended to `Machine.out` as they happen. Standard library only.
"""

from __future__ import annotations

import dataclasses
import dis
import sys
import types
from typing import Any

_FLAG_NULL_AFTER = sys.version_info >= (3, 13)     # 3.13 pushes NULL after the callable, not before
_BINARY = {"**": 15, "*": 13, "@": 13, "/": 13, "//": 13, "%": 13, "+": 12, "-": 12, "<<": 11, ">>": 11, "&": 10,
           "^": 9, "|": 8}


class DecompileError(Exception):
    def __init__(self, inst: dis.Instruction, index: int, what: str) -> None:
        super().__init__(f"#{index} [{inst.offset}] {inst.opname} {inst.argrepr}".rstrip() + f": {what}; "
                         "not a shape Dynamo writes that dynstep's decompiler reads")


class Expr:
    """A value on the symbolic stack: its Python text and what it is made of."""

    __slots__ = ("text", "prec", "reads", "indices", "effect", "named", "items", "inside")

    def __init__(self, text: str, prec: int = 100, reads: frozenset[str] = frozenset(),
                 indices: frozenset[int] = frozenset(), *, effect: bool = False, named: bool = False,
                 items: list[str] | None = None, inside: str | None = None) -> None:
        self.text, self.prec, self.reads, self.indices = text, prec, reads, indices
        self.effect, self.named, self.items = effect, named, items   # items: an unnamed list display's elements
        self.inside = inside        # how it reads between brackets (a slice: "1:"), when that differs

    def wrapped(self, prec: int) -> str:
        return f"({self.text})" if self.prec < prec else self.text

    def key(self) -> str:
        return self.inside if self.inside is not None else self.text


NULL = Expr("NULL")
SELF = Expr("<self>")           # the second slot of a method load (the call shows obj.method(...))


@dataclasses.dataclass(frozen=True)
class Statement:
    """One line of the decompiled function: its text, indentation, user line and the instructions behind it."""

    text: str
    indent: int
    line: int | None
    indices: frozenset[int]


def _made(*parts: Expr) -> tuple[frozenset[str], frozenset[int]]:
    reads: frozenset[str] = frozenset().union(*(p.reads for p in parts))
    return reads, frozenset().union(*(p.indices for p in parts))


class MachineBase:
    def __init__(self, code: types.CodeType, instructions: list[dis.Instruction], lines: dict[int, int | None]) -> None:
        self.code, self.instructions = code, instructions
        self.by_offset = {inst.offset: i for i, inst in enumerate(instructions)}
        self.line_of = _instruction_lines(instructions, lines)
        self.stack: list[Expr] = []
        self.out: list[Statement] = []
        self.indent, self.index, self.temps = 1, 0, 0
        self.kw_names: tuple[str, ...] = ()

    # -- the stack and statements --------------------------------------------------------------
    def position(self, offset: int) -> int:
        return self.by_offset[offset]

    def pop(self) -> Expr:
        if not self.stack:
            raise DecompileError(self.instructions[self.index], self.index, "the value stack is empty here")
        return self.stack.pop()

    def pops(self, n: int) -> list[Expr]:
        values = [self.pop() for _ in range(n)]
        return values[::-1]

    def push(self, text: str, *parts: Expr, prec: int = 100, effect: bool = False, items: list[str] | None = None,
             reads: frozenset[str] = frozenset()) -> Expr:
        made_reads, indices = _made(*parts)
        effect = effect or any(p.effect for p in parts)      # a display holding a call still to be shown
        value = Expr(text, prec, made_reads | reads, indices | {self.index}, effect=effect, items=items)
        self.stack.append(value)
        return value

    def emit(self, text: str, indices: frozenset[int] | set[int]) -> None:
        """A statement; calls still on the stack happened before it, so they are named first."""
        self.flush()
        indices = frozenset(indices) | {self.index}
        self.out.append(Statement(text, self.indent, self._line(indices), indices))

    def _line(self, indices: frozenset[int]) -> int | None:
        first = self.code.co_firstlineno
        here = self.line_of[self.index]
        if here is not None and here != first:
            return here
        others = [self.line_of[i] for i in indices if self.line_of[i] not in (None, first)]
        return min(others) if others else here

    def name(self, value: Expr, name: str | None = None, *, force: bool = False) -> Expr:
        """`value` under a name (a temporary `_tN` unless given), everywhere it is on the stack."""
        if value.named and name is None and not force:
            return value
        self.flush(skip=value)     # earlier calls first, so temporaries are numbered in the order shown
        if name is None:
            self.temps += 1
            name = f"_t{self.temps}"
        named = Expr(name, reads=frozenset({name}), indices=value.indices, named=True)
        self.stack = [named if v is value else v for v in self.stack]
        self.emit(f"{name} = {value.text}", value.indices)
        return named

    def flush(self, skip: Expr | None = None) -> None:
        """Calls still on the stack are named now: their side effects come before what follows."""
        for value in list(self.stack):
            if value.effect and value is not skip and any(v is value for v in self.stack):
                self.name(value)

    def settle(self) -> None:
        """Before a call: values on the stack that read variables or objects are named, so they show what
        they read before the call (which may change those objects), not after."""
        for value in list(self.stack):
            if not value.named and value.reads and value not in (NULL, SELF) and any(v is value for v in self.stack):
                self.name(value)

    def before_write(self, name: str) -> None:
        """Values that read `name` are named before `name` changes or is mutated (they were computed before)."""
        for value in list(self.stack):
            if name in value.reads and any(v is value for v in self.stack):
                self.name(value, force=value.named and value.text == name)

    def step(self, inst: dis.Instruction) -> bool:
        handler = getattr(self, f"op_{inst.opname}", None)
        if handler is None:
            raise DecompileError(inst, self.index, "no handler for this opcode")
        return bool(handler(inst))

    # -- loads ---------------------------------------------------------------------------------
    def op_NOP(self, inst: dis.Instruction) -> None:
        pass

    op_RESUME = op_PRECALL = op_MAKE_CELL = op_COPY_FREE_VARS = op_EXTENDED_ARG = op_NOT_TAKEN = op_NOP

    def op_LOAD_FAST(self, inst: dis.Instruction) -> None:
        self.push(str(inst.argval), reads=frozenset({str(inst.argval)})).named = True

    op_LOAD_FAST_CHECK = op_LOAD_FAST_AND_CLEAR = op_LOAD_DEREF = op_LOAD_CLOSURE = op_LOAD_NAME = op_LOAD_FAST
    op_LOAD_FAST_BORROW = op_LOAD_FAST

    def op_LOAD_FAST_LOAD_FAST(self, inst: dis.Instruction) -> None:
        for name in inst.argval:
            self.push(str(name), reads=frozenset({str(name)})).named = True

    def op_LOAD_CONST(self, inst: dis.Instruction) -> None:
        self.push(repr(inst.argval)).named = True

    def op_LOAD_SMALL_INT(self, inst: dis.Instruction) -> None:
        self.op_LOAD_CONST(inst)

    def op_LOAD_GLOBAL(self, inst: dis.Instruction) -> None:
        null = inst.argrepr.startswith("NULL + ") or inst.argrepr.endswith(" + NULL")
        if null and not _FLAG_NULL_AFTER:
            self.stack.append(NULL)
        self.push(str(inst.argval)).named = True
        if null and _FLAG_NULL_AFTER:
            self.stack.append(NULL)

    def op_LOAD_ATTR(self, inst: dis.Instruction) -> None:
        obj = self.pop()
        method = sys.version_info >= (3, 12) and bool((inst.arg or 0) & 1)
        self.push(f"{obj.wrapped(100)}.{inst.argval}", obj)
        if method:
            self.stack.append(SELF)

    def op_LOAD_METHOD(self, inst: dis.Instruction) -> None:
        obj = self.pop()
        self.push(f"{obj.wrapped(100)}.{inst.argval}", obj)
        self.stack.append(SELF)

    def op_PUSH_NULL(self, inst: dis.Instruction) -> None:
        self.stack.append(NULL)

    def op_LOAD_ASSERTION_ERROR(self, inst: dis.Instruction) -> None:
        self.push("AssertionError").named = True

    def op_KW_NAMES(self, inst: dis.Instruction) -> None:
        self.kw_names = tuple(self.code.co_consts[inst.arg or 0])    # 3.11's dis leaves argval unresolved

    # -- the stack -----------------------------------------------------------------------------
    def op_COPY(self, inst: dis.Instruction) -> None:
        value = self.stack[-inst.arg]
        if not value.named:     # the copy goes straight into a local (``COPY 1; STORE_FAST tmp_1``): name it so
            after = self.instructions[self.index + 1] if self.index + 1 < len(self.instructions) else None
            store = after is not None and inst.arg == 1 and after.opname in ("STORE_FAST", "STORE_DEREF")
            value = self.name(value, str(after.argval) if store and after is not None else None)
        self.stack.append(value)

    def op_SWAP(self, inst: dis.Instruction) -> None:
        self.stack[-1], self.stack[-inst.arg] = self.stack[-inst.arg], self.stack[-1]

    def op_POP_TOP(self, inst: dis.Instruction) -> None:
        value = self.pop()
        if value.effect:
            self.emit(value.text, value.indices)

    # -- calls ---------------------------------------------------------------------------------
    def _callable(self, args: list[str], parts: list[Expr]) -> tuple[str, list[str], list[Expr]]:
        second, first = self.pop(), self.pop()
        if first is NULL:
            return second.wrapped(100), args, parts + [second]
        if second is NULL or second is SELF:
            return first.wrapped(100), args, parts + [first]
        return first.wrapped(100), [second.text, *args], parts + [first, second]

    def _call(self, count: int, kw_names: tuple[str, ...]) -> None:
        values = self.pops(count)
        positional = values[:len(values) - len(kw_names)]
        texts = [v.text for v in positional] + [f"{k}={v.text}" for k, v in zip(kw_names, values[len(positional):])]
        fn, texts, parts = self._callable(texts, list(values))
        self.settle()
        self.push(f"{fn}({', '.join(texts)})", *parts, effect=True)

    def op_CALL(self, inst: dis.Instruction) -> None:
        kw, self.kw_names = self.kw_names, ()
        self._call(inst.arg or 0, kw)

    def op_CALL_KW(self, inst: dis.Instruction) -> None:
        names = self.pop()
        self._call(inst.arg or 0, tuple(_constant_tuple(names)))

    def op_CALL_FUNCTION_EX(self, inst: dis.Instruction) -> None:
        kwargs = self.pop() if (inst.arg or 0) & 1 or sys.version_info >= (3, 14) else None
        args = self.pop()
        texts = [f"*{args.wrapped(100)}"] + ([f"**{kwargs.wrapped(100)}"] if kwargs is not None and
                                            kwargs.text != "NULL" else [])
        fn, texts, parts = self._callable(texts, [args] + ([kwargs] if kwargs is not None else []))
        self.settle()
        self.push(f"{fn}({', '.join(texts)})", *parts, effect=True)

    def op_CALL_INTRINSIC_1(self, inst: dis.Instruction) -> None:
        value = self.pop()
        name = inst.argrepr.removeprefix("INTRINSIC_").lower()
        self.push("tuple(" + value.text + ")" if name == "list_to_tuple" else f"{name}({value.text})", value)


def _constant_tuple(value: Expr) -> tuple[Any, ...]:
    import ast

    try:
        found = ast.literal_eval(value.text)
    except (ValueError, SyntaxError):
        return ()
    return tuple(found) if isinstance(found, tuple) else ()


def _bound(value: Expr) -> str:
    return "" if value.text == "None" else value.text


def _instruction_lines(instructions: list[dis.Instruction], overrides: dict[int, int | None]) -> list[int | None]:
    out: list[int | None] = []
    line = None
    for i, inst in enumerate(instructions):
        if inst.starts_line is not None and not isinstance(inst.starts_line, bool):
            line = inst.starts_line
        elif getattr(inst, "line_number", None) is not None:   # 3.13: starts_line is a bool
            line = inst.line_number
        out.append(overrides.get(i, line))
    return out
