"""Handing a stop over to an attached debugger: arm breakpoints there, never kill the program.

`trap(report)` checks that a *debugger* traces this process (TracerPid in /proc/self/status, and
its command name: a SIGTRAP under strace, or with no tracer at all, would kill the process with
exit status 133), writes the breakpoints as JSON to `handoff_path()`, and raises SIGTRAP on this
thread. The dynstep gdb commands (dynstep/mixed/gdb_commands.py) see that stop, read the file,
create the breakpoints, delete the file and let the program go on; a gdb without them stops at
the trap, and the commands to type are in the outcome.

    outcome = trap(report)
    outcome.trapped, outcome.reason, outcome.commands
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import tempfile
import threading

from .findings import BreakTarget, NativeKernel, NativeReport, TrapOutcome, merged_targets

DEBUGGERS = ("gdb", "cuda-gdb", "gdbserver", "lldb", "lldb-server")
HANDOFF_VERSION = 1


def tracer() -> tuple[int, str]:
    """(pid, command name) of the process tracing this one; (0, "") when none."""
    pid = 0
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    pid = int(line.split()[1])
                    break
    except (OSError, ValueError):
        return 0, ""
    if not pid:
        return 0, ""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return pid, f.read().strip()
    except OSError:
        return pid, "?"


def is_debugger(name: str) -> bool:
    """`name` is the tracer's /proc/PID/comm (15 characters at most). cuda-gdb runs as
    `cuda-gdb-python` (its Python-enabled binary; seen on an H200 with CUDA 13.0)."""
    return name in DEBUGGERS or "gdb" in name.split("-") or name.startswith("gdb")


def handoff_path(pid: int | None = None) -> str:
    """The file the gdb side reads at a dynstep SIGTRAP (same temp dir on both sides)."""
    return os.path.join(tempfile.gettempdir(), f"dynstep-gdb-{pid or os.getpid()}.json")


def trap(report: NativeReport, only: tuple[NativeKernel, ...] | None = None) -> TrapOutcome:
    """Arm breakpoints for the report's kernels (or `only` these) in the attached debugger."""
    kernels = only if only is not None else report.kernels + report.other_variant
    targets = merged_targets(kernels)
    commands = tuple(t.gdb_command for t in targets)
    pid, name = tracer()
    base = TrapOutcome(trapped=False, tracer_pid=pid, tracer=name, reason="", commands=commands)
    if not targets:
        return dataclasses.replace(base, reason="nothing to break on: " + ("; ".join(report.problems)
                                                                         or "no kernel found for this node"))
    if not pid:
        return dataclasses.replace(base, reason="no debugger is attached (TracerPid 0)")
    if not is_debugger(name):
        return dataclasses.replace(base, reason=f"this process is traced by {name!r} (pid {pid}), not a debugger")
    path = handoff_path()
    _write_atomically(path, _payload(report, kernels))
    # pthread_kill, not os.kill(getpid()): the signal lands on this thread, so the debugger's
    # selected thread is the Python one (os.kill lets the kernel pick any thread, an OpenMP worker)
    signal.pthread_kill(threading.get_ident(), signal.SIGTRAP)
    consumed = not os.path.exists(path)
    if not consumed:   # a debugger without dynstep's commands: the user typed the breakpoints, or not
        os.unlink(path)
    return dataclasses.replace(base, trapped=True, handoff=path if consumed else "")


def _payload(report: NativeReport, kernels: tuple[NativeKernel, ...]) -> dict:
    """The hand-off the gdb side reads: the node, its kernels, and one entry per breakpoint naming
    the kernels it belongs to (an aten kernel shared by both variants of a graph is one breakpoint)."""
    def owners(t: BreakTarget) -> list[int]:
        return [i for i, k in enumerate(kernels) if any((x.address, x.cuda_kernel) == (t.address, t.cuda_kernel)
                                                      for x in k.targets)]

    return {
        "version": HANDOFF_VERSION, "pid": os.getpid(),
        "node": {"node": report.node, "op": report.target, "module": report.module, "source": report.source,
                 "source_text": report.source_text, "graph": report.graph, "compiler": report.compiler},
        "kernels": [{"name": k.name, "kind": k.kind, "nodes": list(k.nodes), "library": k.library,
                     "symbol": k.symbol, "source": k.source, "launch_line": k.launch_line, "graph": k.graph}
                    for k in kernels],
        "targets": [{"address": t.address, "size": t.size, "library": t.library, "symbol": t.symbol,
                     "sites": [list(s) for s in t.sites], "cuda_kernel": t.cuda_kernel, "kernels": owners(t)}
                    for t in merged_targets(kernels)],
    }


def _write_atomically(path: str, payload: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f)
    os.replace(tmp, path)
