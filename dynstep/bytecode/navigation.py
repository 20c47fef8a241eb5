"""The bytecode stepper's frame commands: up/down, return, catch, and Python statements at the prompt.

Mixed into `dynstep.bytecode.commands.Commands` (so into `BytecodeStepper`). `up`/`down` move among
the Dynamo-produced frames on the stack (`bt` lists them); the looking commands (`p`, `locals`,
`stack`, `l`, `src`, `guards`, `code`, statements) then read the selected frame, while moving
commands run the program as usual. A line that is not a command runs as Python in the selected
frame (``x = x * 2``, ``d["k"] = 1``, ``import math``); ``!`` forces that for a line starting with
a command's name (``!s = 3``). Assignments reach the frame's variables: the locals are read once
per stop and written back (PyFrame_LocalsToFast before Python 3.13, the write-through proxy on 3.13).

    stepper.execute("u"); stepper.execute("p tmp_1"); stepper.execute("d")
    stepper.execute("x = x + 1")        # the frame's x changes
"""

from __future__ import annotations

import ctypes
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.commands import CommandSet, names
from ..core.events import CommandFailed, Evaluated, Info, Resumed, emit
from ..step.values import safe_text, tensor_view
from .events import FrameSelected
from .views import instruction_row

if TYPE_CHECKING:
    from .code import Here

_RETURNS = ("RETURN_VALUE", "RETURN_CONST")


class FrameCommands(CommandSet):
    current: "Here | None"
    infos: dict[types.CodeType, Any]
    breakpoints: dict[types.CodeType, set[int]]
    user_vars: dict[str, Any]
    mode: str
    level: int
    catch: bool
    return_from: types.FrameType | None
    locals_seen: dict[int, dict[str, Any]]
    exception: BaseException | None
    here_of: Callable[..., "Here"]

    def tracked_frames(self) -> list[types.FrameType]:
        """Dynamo-produced frames on the stack, from the stopped one outwards."""
        out, f = [], (self.current.frame if self.current is not None else None)
        while f is not None:
            if f.f_code in self.infos:
                out.append(f)
            f = f.f_back
        return out

    def _here(self) -> "Here":
        """The selected frame (`up`/`down`) where the program is stopped."""
        assert self.current is not None
        if self.level == 0:
            return self.current
        frames = self.tracked_frames()
        return self.here_of(frames[min(self.level, len(frames) - 1)])

    def frame_locals(self, frame: types.FrameType) -> Any:
        """The frame's locals, read once per stop (re-reading would drop what a statement assigned)."""
        if sys.version_info >= (3, 13):
            return frame.f_locals                 # PEP 667: a write-through proxy
        if id(frame) not in self.locals_seen:
            self.locals_seen[id(frame)] = frame.f_locals
        return self.locals_seen[id(frame)]

    def cmd_up(self, arg: str) -> None:
        """up, u [N]: select the Dynamo-produced frame that called this one (N frames out)."""
        self._select(self.level + (int(arg) if arg else 1))

    def cmd_down(self, arg: str) -> None:
        """down, d [N]: select the frame this one called, back towards where the program stopped."""
        self._select(self.level - (int(arg) if arg else 1))

    def _select(self, level: int) -> None:
        frames = self.tracked_frames()
        if not 0 <= level < len(frames):
            raise ValueError(f"no frame {'above' if level > 0 else 'below'}: the Dynamo-produced frames are "
                             f"0 (where the program stopped) to {len(frames) - 1} (`bt` lists them)")
        self.level = level
        here = self._here()
        row = instruction_row(here.row, self.breakpoints.get(here.info.code, set()))
        emit(FrameSelected(level=level, count=len(frames), title=here.info.title, file=here.info.code.co_filename,
                           line=here.row.line, row=row))

    def cmd_return(self, arg: str) -> bool:
        """return, r: run until the selected frame is about to return (the top of `stack` is the value)."""
        frame = self._here().frame
        self.mode, self.return_from = "return", frame
        emit(Resumed("return"))
        return True

    def cmd_catch(self, arg: str) -> None:
        """catch [on|off]: stop where an exception is raised in, or passes through, Dynamo's code (on by default)."""
        if arg not in ("", "on", "off"):
            raise ValueError("usage: catch on | catch off")
        if arg:
            self.catch = arg == "on"
        emit(Info(f"exception stops are {'on' if self.catch else 'off'}"))

    def execute(self, line: str) -> bool:
        text = line.strip()
        if text.startswith("!"):
            return self._statement(text[1:])
        name = text.partition(" ")[0]
        if text and not hasattr(self, f"cmd_{self.aliases.get(name, name)}") and self.at_stop():
            return self._statement(text)
        return super().execute(line)

    def _statement(self, source: str) -> bool:
        """Python in the selected frame: an expression is shown (like p), a statement runs."""
        try:
            here = self._here()
            scope = self.frame_locals(here.frame)
            extra = {k: v for k, v in {**self.user_vars, "exc": self.exception}.items() if k not in scope}
            try:
                code, is_expr = compile(source, "<dynstep>", "eval"), True
            except SyntaxError:
                code, is_expr = compile(source, "<dynstep>", "exec"), False
            namespace = _Chain(scope, extra)
            result = eval(code, here.frame.f_globals, namespace)
            if is_expr:
                emit(Evaluated(source, safe_text(result), tensor_view(result)))
                return False
            write_back(here.frame, scope)
            emit(Info(f"ran in {here.info.title}"))
        except Exception as exc:    # a typo must not take the program down (as for commands)
            if isinstance(exc, NameError) and source.strip().isidentifier():   # a typo of a command, most likely
                emit(CommandFailed(source, f"unknown command {source.strip()!r} (nor a name in this frame); commands: "
                                           f"{', '.join(names(type(self)))} (help shows what each does)"))
                return False
            emit(CommandFailed(source, f"{type(exc).__name__}: {exc}"))
        return False


def is_return(row: Any) -> bool:
    return row.opname in _RETURNS


class _Chain(dict):
    """Locals for eval/exec: reads fall back to `extra` (dynstep's names), writes go to `scope`."""

    def __init__(self, scope: Any, extra: dict[str, Any]) -> None:
        super().__init__()
        self.scope, self.extra = scope, extra

    def __getitem__(self, key: str) -> Any:
        if key in self.scope:
            return self.scope[key]
        return self.extra[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.scope[key] = value

    def __delitem__(self, key: str) -> None:
        del self.scope[key]

    def __contains__(self, key: object) -> bool:
        return key in self.scope or key in self.extra


def write_back(frame: types.FrameType, scope: Any) -> None:
    """Assignments made in the `scope` dict reach the frame's variables (3.13's proxy already wrote them)."""
    if sys.version_info >= (3, 13):
        return
    # CPython's PyFrame_LocalsToFast(frame, clear=0) copies frame.f_locals back into the fast locals
    # (what a trace function's return does on 3.11, and what sys.monitoring callbacks never do)
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
