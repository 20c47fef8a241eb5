"""The one command dispatcher of dynstep's three command sets (runtime stepper, bytecode stepper,
compile-time stop).

A command is a method ``cmd_<name>`` whose docstring's first line is its help; `aliases` map short
names to full ones, so each set stays open to new commands. `CommandSet.execute(line)` parses the
line, finds the method, runs it and turns any failure into a `CommandFailed` event: a typo at a
stop must never take the debugged program down. A command returns True when it resumes the
program.

    class Stepper(CommandSet):
        aliases = {"c": "continue"}
        def cmd_continue(self, arg): ...
    stepper.execute("c")                 -> True
    split_commands("p 'a;b'; c")         -> ["p 'a;b'", "c"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from .errors import Abort
from .events import CommandFailed, HelpShown, emit


class CommandSet:
    """Dispatch command lines to ``cmd_<name>`` methods (see the module docstring)."""

    aliases: ClassVar[Mapping[str, str]] = {}
    #: commands that work while the program runs (all others need a stop)
    without_stop: ClassVar[frozenset[str]] = frozenset({"help"})

    def at_stop(self) -> bool:
        """Whether the program is stopped (commands outside `without_stop` need it)."""
        return True

    def execute(self, line: str) -> bool:
        """Run one command line; True when it resumes the program."""
        line = line.strip()
        if not line:
            return False
        name, _, arg = line.partition(" ")
        return self.run_command(self.aliases.get(name, name), arg.strip(), line=line)

    def run_command(self, name: str, arg: str = "", *, line: str | None = None) -> bool:
        """A command by its full name as its table names it (`dynstep.core.command_table`), with no
        line to parse: what a DAP resume request runs. True when it resumes the program."""
        line = line if line is not None else f"{name} {arg}".strip()
        method = getattr(self, f"cmd_{name}", None)
        if method is None:
            emit(CommandFailed(line, f"unknown command {name!r}; commands: {', '.join(names(type(self)))} "
                                     "(help shows what each does)"))
            return False
        if name not in self.without_stop and not self.at_stop():
            emit(CommandFailed(line, f"{name!r} needs a stop; the program is not paused"))
            return False
        try:
            return bool(method(arg))
        except Abort:
            raise
        except Exception as exc:   # a typo in an expression must not take the program down
            emit(CommandFailed(line, f"{type(exc).__name__}: {exc}"))
            return False

    def cmd_help(self, arg: str) -> None:
        """help, h: this list."""
        emit(HelpShown(help_entries(self, self.aliases)))


def names(cls: type) -> list[str]:
    return sorted(n[4:] for n in dir(cls) if n.startswith("cmd_"))


def label(name: str, aliases: Mapping[str, str]) -> str:
    return ", ".join([name, *[a for a, full in aliases.items() if full == name]])


def help_entries(obj: Any, aliases: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((label(n, aliases), (getattr(obj, f"cmd_{n}").__doc__ or n).strip().splitlines()[0])
                 for n in names(type(obj)))


def split_commands(script: str) -> list[str]:
    """One command per line or per ``;``, except a ``;`` inside a quoted string.

    ``"p value.mean(); s; c"`` -> ["p value.mean()", "s", "c"];
    ``"p 'a;b'; p d[';']"`` -> ["p 'a;b'", "p d[';']"]. An unclosed quote ends at the end of its line.
    """
    out: list[str] = []
    for line in script.splitlines():
        current, quote, escaped = [], "", False
        for ch in line:
            if escaped:
                escaped = False
            elif ch == "\\" and quote:
                escaped = True
            elif quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == ";":
                out.append("".join(current))
                current = []
                continue
            current.append(ch)
        out.append("".join(current))
    return [part.strip() for part in out if part.strip()]
