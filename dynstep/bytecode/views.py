"""The three views of a stop in Dynamo's bytecode: user source, bytecode, decompiled Python.

Each view is data (events from `dynstep.bytecode.events`), never printed here. A view that
cannot be produced says why instead of raising: a failing view must never stop the program.

    source_view(info, row)           SourceShown: the user's lines around the instruction's line
    bytecode_view(info, row, bps)    BytecodeShown: instructions around (or all of) the code object
    decompiled_view(info, row)       DecompiledShown: Python (dynstep's decompiler, else depyf), the
                                     statement of the current instruction marked, or why there is none
"""

from __future__ import annotations

import functools
import linecache
import sys
import types

from .code import CodeInfo, Row
from .decompile import DecompileError, decompile
from .events import BytecodeShown, DecompiledShown, InstructionRow, SourceShown

DEPYF_PYTHONS = ((3, 8), (3, 12))    # depyf 0.20 decompiles bytecode of these Python versions (inclusive)


def instruction_row(row: Row, breakpoints: set[int]) -> InstructionRow:
    return InstructionRow(index=row.index, offset=row.offset, text=row.text(), line=row.line, region=row.region,
                          side_effect=row.side_effect, breakpoint=row.index in breakpoints)


def source_view(info: CodeInfo, row: Row, context: int = 4) -> SourceShown:
    file = info.code.co_filename
    line = row.line
    center = line if line is not None else info.code.co_firstlineno
    lines = tuple((i, linecache.getline(file, i).rstrip("\n")) for i in range(max(1, center - context),
                                                                                center + context + 1)
                  if linecache.getline(file, i))
    return SourceShown(file=file, line=line, lines=lines)


def bytecode_view(info: CodeInfo, row: Row, breakpoints: set[int], *, start: int | None = None,
                  count: int = 11, everything: bool = False) -> BytecodeShown:
    if everything:
        chosen = info.rows
    else:
        first = max(0, row.index - count // 2) if start is None else max(0, start)
        chosen = info.rows[first:first + count]
    return BytecodeShown(title=info.title, rows=tuple(instruction_row(r, breakpoints) for r in chosen),
                         current=row.index)


def decompiled_view(info: CodeInfo, row: Row | None = None) -> DecompiledShown:
    """The code object as Python: dynstep's decompiler (Python 3.11-3.13, the shapes Dynamo writes, every
    statement tagged with its user line), else depyf when installed, else why neither could."""
    source, reason, marks = _decompile(info.code, info.title, tuple((r.index, r.line) for r in info.rows))
    mark = 0
    if source is not None and row is not None:
        mark = next((n for n, indices in marks if row.index in indices), 0)
    return DecompiledShown(title=info.title, source=source, reason=reason, mark=mark)


Marks = tuple[tuple[int, frozenset[int]], ...]


@functools.lru_cache(maxsize=64)
def _decompile(code: types.CodeType, title: str,
               lines: tuple[tuple[int, int | None], ...]) -> tuple[str | None, str, Marks]:
    """(source, how it was made or why not, (source line, instruction indexes) per statement)."""
    try:
        made = decompile(code, title=title, lines=dict(lines))
    except DecompileError as exc:
        why = f"dynstep's decompiler: {exc}"
    else:
        marks = tuple((n + 2, s.indices) for n, s in enumerate(made.statements))   # line 1 is the def
        return made.source, "decompiled by dynstep (each statement with the user line it stands for)", marks
    source, reason = _depyf(code)
    return source, (f"{reason} ({why})" if source is None else f"{reason}; {why}"), ()


def _depyf(code: types.CodeType) -> tuple[str | None, str]:
    low, high = DEPYF_PYTHONS
    here = sys.version_info[:2]
    if not low <= here <= high:
        return None, (f"depyf cannot decompile Python {here[0]}.{here[1]} bytecode either (it supports "
                      f"{low[0]}.{low[1]}-{high[0]}.{high[1]}; depyf#16, #62, #63); showing bytecode only")
    try:
        import depyf
    except ImportError:
        return None, "depyf is not installed either (pip install depyf); showing bytecode only"
    try:
        return depyf.decompile(code), "decompiled by depyf"
    except Exception as exc:   # an opcode depyf does not handle: the bytecode view still works
        return None, f"depyf could not decompile {code.co_name}: {type(exc).__name__}: {exc}; showing bytecode only"
