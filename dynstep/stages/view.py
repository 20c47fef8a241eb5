"""`code [stage]` at a stop: one stage of the current compile, the lines of the current node marked.

    stage_list("0/0")                                   -> every stage the compile has (names, variants)
    show("0/0", "inductor", node="mm", source="model.py:33")      -> StageShown
    show("0/0", "bytecode", index=12)                   # at a bytecode stop: the statement of instruction 12

A stage that exists twice in a compile (superstep compiles a graph with stop points and, to run when
nothing can stop, one without) is shown as the one with dynstep's ops in it: that is the one a stop
is in; ``NAME#1`` picks the other.
"""

from __future__ import annotations

import functools
import os
import types

from ..bytecode.code import analyse
from ..bytecode.decompile import DecompileError, decompile
from ..bytecode.replay import replay_lines
from .. import _compat
from .annotate import marks_of, node_sources, note_of
from .capture import STAGES
from .stage import STAGE_NAMES, LineMark, Stage, StageShown

WINDOW = 12


def stages_of(compile_id: str, code: types.CodeType | None = None) -> list[Stage]:
    """What torch wrote for the compile, then the code Dynamo wrote for it as Python (`code`: that code
    object, also when nothing captured the compile: a bytecode stop always has its own code)."""
    codes = STAGES.code_of(compile_id)
    codes += [code] if code is not None and code not in codes else []
    return STAGES.of(compile_id) + [s for s in (bytecode_stage(c, compile_id) for c in codes) if s]


def bytecode_stage(code: types.CodeType, compile_id: str) -> Stage | None:
    made = _decompiled(code)
    if made is None:
        return None
    return Stage("bytecode", compile_id, made.source, function=code.co_name)


@functools.lru_cache(maxsize=128)
def _decompiled(code: types.CodeType):   # noqa: ANN202 (a Decompiled, or None)
    info = analyse(code)
    info = info.with_lines(replay_lines(info, _compat.original_code(code)))
    try:
        return decompile(code, title=info.title, lines={r.index: r.line for r in info.rows})
    except DecompileError:
        return None


def stage_list(compile_id: str, code: types.CodeType | None = None) -> tuple[str, ...]:
    names = []
    for s in stages_of(compile_id, code):
        names.append(s.name + (f"#{s.variant}" if s.variant else ""))
    return tuple(dict.fromkeys(names))


def pick(compile_id: str, wanted: str, code: types.CodeType | None = None) -> Stage:
    """The stage `wanted` ("aot", "inductor#1") of the compile; ValueError listing what exists."""
    name, _, number = wanted.partition("#")
    found = [s for s in stages_of(compile_id, code) if s.name == name]
    if name not in STAGE_NAMES:
        raise ValueError(f"no stage {wanted!r}; stages: {', '.join(STAGE_NAMES)} (`code` lists this compile's)")
    if not found:
        have = ", ".join(stage_list(compile_id, code)) or "none captured"
        raise ValueError(f"compile {compile_id or '?'} has no {name} stage (this compile has: {have}); stages are "
                         "captured under dynstep run and from the first graph compiled with stop points on")
    if number:
        if not number.isdigit() or int(number) >= len(found):
            raise ValueError(f"compile {compile_id} has {len(found)} {name} stage(s): {name}#0-{len(found) - 1}")
        return found[int(number)]
    return next((s for s in found if "dynstep" in s.text), found[0])


def show(compile_id: str, wanted: str, *, node: str = "", source: str = "", index: int | None = None,
         whole: bool = False, code: types.CodeType | None = None) -> StageShown:
    stage = pick(compile_id, wanted, code)
    marks = marks_for(stage, compile_id, code)
    here = _marked(stage, marks, node, source, index, code)
    lines = stage.text.splitlines()
    if whole or not here:
        first, last = 1, (len(lines) if whole else min(len(lines), 2 * WINDOW + 1))
    else:
        first, last = max(1, here[0] - WINDOW), min(len(lines), here[0] + WINDOW)
    # Inductor's code says nothing of the user's lines; the FX graphs and the decompiled bytecode already do
    notes = tuple((m.line, note_of(m)) for m in marks if first <= m.line <= last and stage.name.startswith("inductor"))
    shown = tuple((n, lines[n - 1]) for n in range(first, last + 1))
    more = "" if whole or (first == 1 and last == len(lines)) else f"lines {first}-{last} of {len(lines)} (code {wanted} all)"
    return StageShown(stage.name, stage.title, shown, tuple(here), notes, stage_list(compile_id, code), stage.path, more)


def marks_for(stage: Stage, compile_id: str, code: types.CodeType | None = None) -> tuple[LineMark, ...]:
    if stage.name == "bytecode":
        code = _code_of(stage, code)
        made = _decompiled(code) if code is not None else None
        if made is None:
            return ()
        return tuple(LineMark(n, (), f"{code.co_filename}:{s.line}" if s.line else "")
                     for n, s in enumerate(made.statements, start=2))
    dynamo = next((s for s in STAGES.of(compile_id) if s.name == "dynamo"), None)
    return marks_of(stage, node_sources(dynamo))


def _code_of(stage: Stage, code: types.CodeType | None) -> types.CodeType | None:
    """The code object a bytecode stage was made from."""
    codes = STAGES.code_of(stage.compile_id) + ([code] if code is not None else [])
    return next((c for c in codes if c.co_name == stage.function), None)


def _marked(stage: Stage, marks: tuple[LineMark, ...], node: str, source: str, index: int | None,
            code: types.CodeType | None) -> list[int]:
    if stage.name == "bytecode" and index is not None:
        code = _code_of(stage, code)
        made = _decompiled(code) if code is not None else None
        statement = made.statement_at(index) if made is not None else None
        return [made.statements.index(statement) + 2] if statement is not None else []
    by_node = [m.line for m in marks if node and node in m.nodes]
    if by_node and stage.name in ("dynamo", "inductor", "inductor-backward"):
        return by_node
    return [m.line for m in marks if source and _same_line(m.source, source)]


def _same_line(a: str, b: str) -> bool:
    """``/x/model.py:33`` and ``model.py:33`` are the same user line."""
    fa, _, la = a.rpartition(":")
    fb, _, lb = b.rpartition(":")
    return bool(la) and la == lb and os.path.basename(fa) == os.path.basename(fb)
