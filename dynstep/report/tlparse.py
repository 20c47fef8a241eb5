"""Running tlparse (`pip install dynstep[report]`) on a `TORCH_TRACE` folder, for `dynstep report --tlparse`.

    result = run_tlparse("trace/", "run.tlparse")    # TlparseResult(ok, out, index, log, message)

superstep writes its own artifacts into the trace under each graph's compile id (the probe and
pause plan, the instrumented graph, the node -> source map; at run time the pause log and the
diff report), so tlparse lists them under the graph's [0/0] entry beside torch's own.

tlparse's ``--overwrite`` deletes its output folder: it is only passed when that folder is absent
or is itself a tlparse output; any other folder is refused.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

_TLPARSE_MARKS = ("compile_directory.json", "raw.jsonl")


@dataclasses.dataclass(frozen=True)
class TlparseResult:
    ok: bool
    out: str                 # tlparse's output folder
    index: str               # its index.html ("" when it failed)
    log: str                 # the trace log it read
    message: str             # what went wrong, or what was read when there was a choice


def find_tlparse() -> str | None:
    """The tlparse executable: on PATH, or beside this Python (a venv not activated)."""
    found = shutil.which("tlparse")
    if found:
        return found
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, "tlparse")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def trace_logs(trace: str | Path) -> list[Path]:
    """The structured-trace logs at `trace` (a log file, or the TORCH_TRACE folder), newest last."""
    trace = Path(trace)
    if trace.is_file():
        return [trace]
    if not trace.is_dir():
        return []
    return sorted((p for p in trace.iterdir() if p.suffix == ".log" and p.is_file()), key=lambda p: p.stat().st_mtime)


def run_tlparse(trace: str | Path, out: str | Path, *, timeout: float = 300) -> TlparseResult:
    out = Path(out)
    exe = find_tlparse()
    if exe is None:
        return TlparseResult(False, str(out), "", "", "tlparse is not installed (pip install 'dynstep[report]' "
                             "or pip install tlparse)")
    logs = trace_logs(trace)
    if not logs:
        return TlparseResult(False, str(out), "", "", f"no structured-trace log (*.log) at {trace}; run the "
                             "script with TORCH_TRACE=<folder> and pass that folder")
    if out.exists() and not all((out / mark).exists() for mark in _TLPARSE_MARKS):
        return TlparseResult(False, str(out), "", str(logs[-1]), f"{out} exists and is not a tlparse output; "
                             "tlparse would delete it: choose another output path")
    note = f"read the newest of {len(logs)} logs: {logs[-1].name}" if len(logs) > 1 else ""
    try:
        done = subprocess.run([exe, str(logs[-1]), "-o", str(out), "--no-browser", "--overwrite"],
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return TlparseResult(False, str(out), "", str(logs[-1]), f"tlparse could not run: {exc}")
    index = out / "index.html"
    if done.returncode != 0 or not index.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return TlparseResult(False, str(out), "", str(logs[-1]),
                             f"tlparse failed (exit {done.returncode}): {' / '.join(tail)}")
    return TlparseResult(True, str(out), str(index), str(logs[-1]), note)
