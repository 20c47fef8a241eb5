"""The events mixed-mode debugging emits; front ends render them (dynstep/front/native_show.py).

    emit(NativeShown(report))                 # `native`
    emit(NativeTrapped(report, outcome))      # `native break`
"""

from __future__ import annotations

import dataclasses

from .findings import NativeReport, TrapOutcome


@dataclasses.dataclass(frozen=True)
class NativeShown:
    """`native`: the native code that computes the stopped node, and what is missing."""

    report: NativeReport


@dataclasses.dataclass(frozen=True)
class NativeTrapped:
    """`native break`: breakpoints handed to the attached debugger, or why not and what to do."""

    report: NativeReport
    outcome: TrapOutcome
