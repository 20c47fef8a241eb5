"""Typed events of the bytecode stepper (`dynstep.bytecode`); `dynstep.front.bytecode_repl` shows them.

Command answers the runtime stepper also gives (`Evaluated`, `Info`, `CommandFailed`,
`HelpShown`, `CommandRead`) are reused from `dynstep.core.events`.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class InstructionRow:
    index: int
    offset: int
    text: str
    line: int | None
    region: str
    side_effect: bool
    breakpoint: bool


@dataclasses.dataclass(frozen=True)
class BytecodeStopped:
    """The bytecode stepper stopped before an instruction of a Dynamo-produced code object."""

    reason: str           # entry, step, next, break, return-from-graph, return, exception
    code: str             # co_name of the code object
    title: str            # "f (transformed by Dynamo)", "resume of f after line 9"
    kind: str             # transformed | resume
    file: str
    line: int | None      # the user's source line Dynamo attributed to the instruction
    source_text: str      # that line's text
    row: InstructionRow
    graph_call: bool      # `s` here steps into the compiled graph
    note: str = ""


@dataclasses.dataclass(frozen=True)
class SourceShown:
    """The user's original source around the current line (`l` with `source`, `ll`)."""

    file: str
    line: int | None
    lines: tuple[tuple[int, str], ...]


@dataclasses.dataclass(frozen=True)
class BytecodeShown:
    """Instructions of the current code object, the current one marked (`l`, `ll`)."""

    title: str
    rows: tuple[InstructionRow, ...]
    current: int


@dataclasses.dataclass(frozen=True)
class DecompiledShown:
    """The code object as Python source (dynstep's decompiler, else depyf), or why it could not be produced."""

    title: str
    source: str | None
    reason: str
    mark: int = 0         # the line of `source` holding the current instruction (0: none)


@dataclasses.dataclass(frozen=True)
class ValuesShown:
    """`stack`, `locals`, `globals`: (name, text) pairs; for the stack the names are slots."""

    title: str
    entries: tuple[tuple[str, str], ...]
    note: str = ""


@dataclasses.dataclass(frozen=True)
class GuardSet:
    entry: int                   # position in Dynamo's cache for the original code (0 = newest)
    current: bool                # the entry whose code is running now
    code_parts: tuple[str, ...]
    failed: tuple[str, ...]      # guards that fail for the frame's current locals


@dataclasses.dataclass(frozen=True)
class GuardsShown:
    function: str
    entries: tuple[GuardSet, ...]
    recompile_reasons: tuple[str, ...]
    note: str = ""


@dataclasses.dataclass(frozen=True)
class FramesShown:
    """`bt`: Dynamo-produced frames on the Python stack, outermost first."""

    frames: tuple[tuple[str, str, int | None, int], ...]     # (title, file, line, instruction index)
    current: int


@dataclasses.dataclass(frozen=True)
class FrameSelected:
    """`up`/`down`: the Dynamo-produced frame the looking commands now read (0: where the program stopped)."""

    level: int
    count: int              # how many Dynamo-produced frames are on the stack
    title: str
    file: str
    line: int | None
    row: InstructionRow     # the instruction that frame runs now (a call, for frames further out)
