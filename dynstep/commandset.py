"""What every command set shares (runtime stepper, bytecode stepper, compile-time stop).

A command is a method ``cmd_<name>`` whose docstring's first line is its help; short aliases map
to full names, so each set stays open to new commands.

    names(Stepper)                       -> ["break", "clear", "continue", ...]
    help_entries(stepper, ALIASES)       -> (("continue, c", "continue, c: run on; ..."), ...)
"""

from __future__ import annotations

from collections.abc import Mapping


def names(cls: type) -> list[str]:
    return sorted(n[4:] for n in dir(cls) if n.startswith("cmd_"))


def label(name: str, aliases: Mapping[str, str]) -> str:
    return ", ".join([name, *[a for a, full in aliases.items() if full == name]])


def help_entries(obj: object, aliases: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((label(n, aliases), (getattr(obj, f"cmd_{n}").__doc__ or n).strip().splitlines()[0])
                 for n in names(type(obj)))
