"""Readable Python for the code objects Dynamo writes, without depyf, on Python 3.11, 3.12 and 3.13.

A small decompiler for the shapes Dynamo's code generation produces (torch/_dynamo/codegen.py,
resume_execution.py): straight-line code that loads globals, locals and constants, calls
(``CALL``, ``CALL_KW``, ``CALL_FUNCTION_EX``, method calls), builds tuples, lists, dicts and
slices, subscripts, stores and deletes locals, items and attributes, shuffles the value stack
(``COPY``, ``SWAP``), extends lists, and returns or raises; forward conditional jumps whose
branch ends in a return or raise (``if cond: return resume_a(...)`` then ``return resume_b(...)``,
a graph break on a data-dependent ``if``); unconditional forward jumps (over exception
handlers, which are not shown). The value stack is run symbolically: values used twice (``COPY``)
or mutated in place are named ``_t1``, ``_t2``...; a call whose result stays on the stack is named
at once, so statements come out in the order their side effects happen. Anything else (loops,
backward jumps, generators, a handler reached by falling through) is a `DecompileError` naming the
instruction, and the bytecode view stays what it was.

    d = decompile(code)
    d.source                       # "def f(x, d, log):\\n    graph_out_0 = __compiled_fn_1(x)  # line 3 ..."
    d.statement_at(index)          # the statement instruction `index` belongs to

Only the standard library is imported (a test runs it under Python 3.12 and 3.13 without torch).
"""

from __future__ import annotations

import dataclasses
import dis
import linecache
import types

from .decompile_ops import DecompileError, Expr, Statement
from .decompile_values import Machine

__all__ = ["DecompileError", "Decompiled", "Statement", "decompile"]

_CONDITIONAL = {"POP_JUMP_IF_FALSE": "{}", "POP_JUMP_IF_TRUE": "not {}", "POP_JUMP_FORWARD_IF_FALSE": "{}",
                "POP_JUMP_FORWARD_IF_TRUE": "not {}", "POP_JUMP_IF_NONE": "{} is not None",
                "POP_JUMP_IF_NOT_NONE": "{} is None", "POP_JUMP_FORWARD_IF_NONE": "{} is not None",
                "POP_JUMP_FORWARD_IF_NOT_NONE": "{} is None"}
_JUMPS = {"JUMP_FORWARD"}


@dataclasses.dataclass(frozen=True)
class Decompiled:
    """A code object as Python: its statements (each with the instructions it came from) and the text."""

    title: str
    statements: tuple[Statement, ...]
    source: str

    def statement_at(self, index: int) -> Statement | None:
        return next((s for s in self.statements if index in s.indices), None)


def decompile(code: types.CodeType, *, title: str = "", lines: dict[int, int | None] | None = None) -> Decompiled:
    """`code` as Python (see the module docstring); `lines` overrides an instruction's user line by index
    (the stepper's side-effect attribution). DecompileError when a shape is not one Dynamo writes."""
    instructions = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    machine = Machine(code, instructions, lines or {})
    _block(machine, 0, len(instructions), [], 1)
    statements = tuple(machine.out)
    return Decompiled(title or code.co_name, statements, _render(code, statements, title))


def _block(m: Machine, start: int, stop: int, stack: list[Expr], indent: int) -> tuple[bool, list[Expr]]:
    """Instructions [start, stop) at `indent`; (True: it ended in a return or raise, the stack at `stop`)."""
    m.stack, m.indent = stack, indent
    i = start
    while i < stop:
        inst = m.instructions[i]
        m.index = i
        if inst.opname in _CONDITIONAL:
            i = _conditional(m, inst, i, indent)
            continue
        if inst.opname in _JUMPS:
            i = m.position(inst.argval)
            continue
        if m.step(inst):
            return True, m.stack
        i += 1
    return False, m.stack


def _conditional(m: Machine, inst: dis.Instruction, i: int, indent: int) -> int:
    """``if COND:`` around the instructions the jump skips, when it jumps forward."""
    if inst.argval <= inst.offset:
        raise DecompileError(inst, i, "a backward jump (a loop)")
    cond = m.pop()
    m.flush()
    target = m.position(inst.argval)
    m.emit(f"if {_CONDITIONAL[inst.opname].format(cond.wrapped(6))}:", {i} | cond.indices)
    saved = list(m.stack)
    ended, _ = _block(m, i + 1, target, list(saved), indent + 1)
    if not ended:          # Dynamo's branches each end in a return (a resume call); this one runs on
        raise DecompileError(inst, i, "a branch that does not end in a return (an if-expression or a loop)")
    m.stack, m.indent = saved, indent
    return target


def _render(code: types.CodeType, statements: tuple[Statement, ...], title: str) -> str:
    args = list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
    if code.co_flags & 0x04:
        args.insert(code.co_argcount, "*" + code.co_varnames[len(args)])
    if code.co_flags & 0x08:
        args.append("**" + code.co_varnames[len(args)])
    head = f"def {code.co_name}({', '.join(args)}):"
    out = [head + (f"    # {title}" if title else "")]
    width = min(72, max([len("    " * s.indent + s.text) for s in statements] + [20]))
    last = object()
    for s in statements:   # the user line once per run of statements that stand for it
        text = "    " * s.indent + s.text
        out.append(f"{text:<{width}}  {_comment(code.co_filename, s.line) if s.line != last else ''}".rstrip())
        last = s.line
    return "\n".join(out) + "\n"


def _comment(file: str, line: int | None) -> str:
    if line is None:
        return ""
    text = linecache.getline(file, line).strip()
    return f"# line {line}: {text}" if text else f"# line {line}"

