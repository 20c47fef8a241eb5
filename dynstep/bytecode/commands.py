"""Commands at a bytecode stop: methods ``cmd_<name>``, the docstring's first line is the help.

The set is open: a new method is a new command; `ALIASES` maps short names to them. Each command
emits events and returns True when it resumes the program. Mixed into
`dynstep.bytecode.stepper.BytecodeStepper`, whose state (`current`, `mode`, `breakpoints`, ...) they
use; dispatched by `dynstep.core.commands.CommandSet`.
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _compat
from ..core.command_table import BYTECODE_STOP
from ..core.commands import names as command_names_of
from ..core.errors import Abort
from ..core.events import Evaluated, Info, Resumed, emit
from ..step.stepper import STEPPER
from ..step.values import safe_text, tensor_view
from .code import live_depth_in_call
from .events import FramesShown, GuardSet, GuardsShown, ValuesShown
from .framestack import FrameStackUnavailable
from .navigation import FrameCommands
from .views import bytecode_view, decompiled_view, source_view

if TYPE_CHECKING:
    from .mechanism import Mechanism
    from .code import Here

ALIASES = BYTECODE_STOP.aliases   # the one table of this set's commands: dynstep/core/command_table.py


class Commands(FrameCommands):
    aliases = ALIASES
    without_stop = BYTECODE_STOP.without_stop
    current: "Here | None"
    mechanism: "Mechanism"
    mode: str
    step_count: int
    next_from: Any
    breakpoints: dict[types.CodeType, set[int]]
    line_breaks: set[tuple[str, int]]
    break_at: set[str]
    infos: dict[types.CodeType, Any]
    user_vars: dict[str, Any]
    list_start: int | None
    add_line_break: Callable[..., bool]
    _is_graph_call: Callable[..., bool]

    def at_stop(self) -> bool:
        return self.current is not None

    def _stopped(self) -> "Here":
        """Where the program is stopped (moving commands act here, whatever frame `up` selected)."""
        assert self.current is not None
        return self.current

    # -- moving -------------------------------------------------------------------------------

    def cmd_step(self, arg: str) -> bool:
        """step, s [N]: run one instruction (N); at the graph call, step into the graph's first node."""
        here = self._stopped()
        count = int(arg) if arg else 1
        if count < 1:
            raise ValueError("s N needs N >= 1")
        if self._is_graph_call(here.info, here.row):
            self.mode = "into"
            emit(Resumed("step into graph"))
            return True
        self.mode, self.step_count = "step", count - 1
        emit(Resumed("step"))
        return True

    def cmd_next(self, arg: str) -> bool:
        """next, n: run to the next source line or part of Dynamo's output in this frame, over calls."""
        here = self._stopped()
        self.mode, self.next_from = "next", (here.frame, here.row.line, here.row.region)
        emit(Resumed("next"))
        return True

    def cmd_continue(self, arg: str) -> bool:
        """continue, c: run until a breakpoint (bytecode or node) or the end."""
        self.mode = "continue"
        emit(Resumed("continue"))
        return True

    def cmd_quit(self, arg: str) -> None:
        """quit, q: stop the program here with dynstep.Abort."""
        here = self._stopped()
        raise Abort(f"quit at instruction {here.row.index} ({here.row.text()}) of {here.info.title}, "
                    f"{here.info.code.co_filename}:{here.row.line}: program stopped from the debugger")

    # -- breakpoints --------------------------------------------------------------------------

    def cmd_break(self, arg: str) -> None:
        """break, b [LINE | FILE:LINE | #INDEX | @OFFSET | graph | entry]: stop at a source line, an instruction here, every graph call, every code object's start."""
        here = self._here()
        info = here.info
        if arg in ("graph", "entry"):
            self.break_at.add(arg)
            emit(Info(f"breakpoint at every {'graph call' if arg == 'graph' else 'entry into Dynamo-produced code'}"))
            return
        if not arg:
            listing = [f"{i.title}: {', '.join(f'#{n}' for n in sorted(idx))}"
                       for code, idx in self.breakpoints.items() if idx for i in [self.infos[code]]]
            listing += [f"line {os.path.basename(f)}:{n}" for f, n in sorted(self.line_breaks)]
            listing += [f"every {'graph call' if b == 'graph' else 'entry'}" for b in sorted(self.break_at)]
            emit(Info("breakpoints: " + ("; ".join(listing) or "none")))
            return
        if arg[0] in "#@":
            number = int(arg[1:])
            index = number if arg[0] == "#" else info.index_of.get(number)
            if index is None or not 0 <= index < len(info.rows):
                raise ValueError(f"no instruction {arg} in {info.title} (indexes #0-#{len(info.rows) - 1}, "
                                 f"offsets @0-@{info.rows[-1].offset}; `ll` lists them)")
            self.breakpoints.setdefault(info.code, set()).add(index)
            emit(Info(f"breakpoint at #{index} [{info.rows[index].offset}] {info.rows[index].text()}"))
            return
        self._line_break(arg, info)

    def _line_break(self, arg: str, info: Any) -> None:
        file, _, number = arg.rpartition(":")
        line = int(number)
        file = os.path.abspath(file) if file else os.path.abspath(info.code.co_filename)
        self.line_breaks.add((file, line))
        hits = [i.title for i in self.infos.values() if self.add_line_break(i, file, line)]
        if hits:
            emit(Info(f"breakpoint at line {line}: in {', '.join(hits)} (and code Dynamo produces later)"))
            return
        emit(Info(f"no Dynamo-produced instruction carries line {line} yet (its code is inside a compiled graph "
                  f"or not compiled yet); also stopping at the graph nodes of that line"))
        STEPPER.commands.cmd_break(f"line:{os.path.basename(file)}:{line}")

    def cmd_clear(self, arg: str) -> None:
        """clear, cl: remove every bytecode breakpoint."""
        self.breakpoints.clear()
        self.line_breaks.clear()
        self.break_at.clear()
        emit(Info("cleared all bytecode breakpoints"))

    # -- looking ------------------------------------------------------------------------------

    def cmd_list(self, arg: str) -> None:
        """list, l [INDEX]: instructions around the current one (l again: the next ones)."""
        here = self._here()
        start = int(arg) if arg else self.list_start
        view = bytecode_view(here.info, here.row, self.breakpoints.get(here.info.code, set()), start=start)
        self.list_start = (view.rows[-1].index + 1) if view.rows else start
        emit(view)

    def cmd_longlist(self, arg: str) -> None:
        """longlist, ll: all three views: the user's source, every instruction, the decompiled Python."""
        here = self._here()
        emit(source_view(here.info, here.row))
        emit(bytecode_view(here.info, here.row, self.breakpoints.get(here.info.code, set()), everything=True))
        emit(decompiled_view(here.info, here.row))

    def cmd_source(self, arg: str) -> None:
        """source, src: the user's original source around the current line."""
        here = self._here()
        emit(source_view(here.info, here.row, context=int(arg) if arg else 4))

    def cmd_decompiled(self, arg: str) -> None:
        """decompiled, dc: this code object as Python (each statement with its user line; the current one marked)."""
        here = self._here()
        emit(decompiled_view(here.info, here.row))

    def cmd_code(self, arg: str) -> None:
        """code [STAGE [all]]: this frame's compile, stage by stage (dynamo, aot, inductor, bytecode), here marked."""
        from ..stages.view import show, stage_list

        here = self._here()
        compile_id = _compat.compile_id_of(here.info.code)
        wanted, _, rest = arg.partition(" ")
        if not wanted:
            have = stage_list(compile_id, here.info.code)
            emit(Info(f"compile {compile_id or '?'} of {here.info.title}: stages {', '.join(have)}; code STAGE shows "
                      "one (code bytecode: this code as Python), code STAGE all all of it (the graphs' stages are "
                      "kept under dynstep run and for graphs with stop points)"))
            return
        source = f"{here.info.code.co_filename}:{here.row.line}" if here.row.line else ""
        emit(show(compile_id, wanted, source=source, index=here.row.index, whole=rest.strip() == "all",
                  code=here.info.code))

    def cmd_stack(self, arg: str) -> None:
        """stack: the real value stack of this frame, bottom first (the top is what the next instruction uses)."""
        here = self._here()
        if here.row.depth is None:
            emit(ValuesShown("value stack", (), note="stack depth unknown at this instruction"))
            return
        try:
            values = self.stack_values()
        except FrameStackUnavailable as exc:
            emit(ValuesShown("value stack", (), note=str(exc)))
            return
        emit(ValuesShown(f"value stack before #{here.row.index} {here.row.text()}",
                         tuple((f"[{i}]", safe_text(v)) for i, v in enumerate(values)),
                         note="" if values else "(empty)"))

    def stack_values(self) -> list[Any]:
        here = self._here()
        depth = here.row.depth or 0
        if self.level > 0:   # a frame further out waits in a call: only the slots still live (code.py)
            depth = live_depth_in_call(here.frame.f_code, here.row.offset, depth)
        return self.mechanism.read_stack(here.frame, depth)

    def cmd_locals(self, arg: str) -> None:
        """locals: the frame's local variables (Dynamo's temporaries too: graph_out_0, tmp_1)."""
        here = self._here()
        emit(ValuesShown("locals", tuple((k, safe_text(v)) for k, v in dict(self.frame_locals(here.frame)).items())))

    def cmd_globals(self, arg: str) -> None:
        """globals [PATTERN]: the frame's globals (without modules and dunders), e.g. globals compiled_fn."""
        here = self._here()
        rows = tuple((k, safe_text(v)) for k, v in here.frame.f_globals.items()
                     if (not arg or arg in k) and not (k.startswith("__") and k.endswith("__"))
                     and not isinstance(v, types.ModuleType))
        emit(ValuesShown("globals", rows))

    def cmd_print(self, arg: str) -> None:
        """print, p EXPR: evaluate EXPR in the frame (locals, globals, and `stack`, the value stack)."""
        if not arg:
            raise ValueError("an expression is needed, e.g. p graph_out_0[0].sum()")
        here = self._here()
        names = {**self.frame_locals(here.frame), **self.user_vars}
        if self.exception is not None:
            names.setdefault("exc", self.exception)
        with contextlib.suppress(FrameStackUnavailable):   # `stack` explains why; p works without it
            names["stack"] = self.stack_values()
        result = eval(compile(arg, "<dynstep>", "eval"), here.frame.f_globals, names)
        emit(Evaluated(arg, safe_text(result), tensor_view(result)))

    def cmd_guards(self, arg: str) -> None:
        """guards: the guards of this frame's compiled entry, and which guards of the other entries fail now."""
        here = self._here()
        original = _compat.original_code(here.info.code)
        if original is None:
            emit(GuardsShown(here.info.title, (), (), note="Dynamo has no record of the code this was made from"))
            return
        entries = _compat.guard_entries(original, dict(self.frame_locals(here.frame)), check_except=here.info.code)
        sets = [GuardSet(entry=n, current=e.code is here.info.code, code_parts=e.code_parts, failed=e.failed)
                for n, e in enumerate(entries)]
        emit(GuardsShown(original.co_name, tuple(sets), tuple(_compat.recompile_reasons(original)),
                         note="other entries are checked against this frame's current locals"))

    def cmd_backtrace(self, arg: str) -> None:
        """backtrace, bt: the Dynamo-produced frames on the stack, outermost first (→ the one selected by up/down)."""
        here = self._stopped()
        frames = []
        f: types.FrameType | None = here.frame
        while f is not None:
            info = self.infos.get(f.f_code)
            if info is not None:
                offset = here.row.offset if f is here.frame else f.f_lasti
                row = info.row_at(offset)
                frames.append((info.title, f.f_code.co_filename, row.line if row else None, row.index if row else -1))
            f = f.f_back
        frames.reverse()
        emit(FramesShown(tuple(frames), current=len(frames) - 1 - self.level))


def command_names() -> list[str]:
    return command_names_of(Commands)
