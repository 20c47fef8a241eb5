"""`dynstep gdb`: a script under gdb (cuda-gdb with --cuda) in one command, with Python frames
(python3.X-gdb.py: py-bt), dynstep's gdb commands and Inductor provenance on, on release builds.

    dynstep gdb --pause "module:blocks.0.mlp" train.py       # (dynstep) native / native break
    dynstep gdb --batch --commands "native break; c" train.py   # CI: dynstep-bt at the kernel, then the end

It finds the debugger and the helper, writes a gdb command file, and runs

    gdb -q [-batch] -iex 'set auto-load python-scripts off' -x CMDFILE -ex run|dynstep-run \\
        --args PYTHON -m dynstep run --native [run options] SCRIPT [ARGS]

gdb exits 0 whatever the program did, so the gdb side writes the program's exit status to a file
(DYNSTEP_GDB_STATUS) and `dynstep gdb` exits with it. gdb kills the program when it quits; the
program also dies with gdb (PR_SET_PDEATHSIG), and gdb with `dynstep gdb`, so nothing is orphaned.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1
SETTINGS = ("set pagination off", "set width 0", "set confirm off", "set print thread-events off",
            "set print inferior-events off", "set breakpoint pending on")


@dataclasses.dataclass(frozen=True)
class GdbSetup:
    """The debugger and the Python helper `dynstep gdb` would use, and what is missing."""

    gdb: str                 # path, "" when not found
    version: str             # its first --version line
    helper: str              # python3.X-gdb.py, "" when not found
    helper_hint: str         # where it was looked for and how to get it
    commands: str            # dynstep's gdb commands (dynstep/mixed/gdb_commands.py)


def commands_file() -> str:
    """dynstep's gdb commands: dynstep/mixed/gdb_commands.py."""
    from .. import mixed

    return os.path.join(os.path.dirname(os.path.abspath(mixed.__file__)), "gdb_commands.py")


def find_gdb(cuda: bool = False) -> str:
    """cuda-gdb for --cuda; else gdb, or cuda-gdb where there is no plain gdb (it debugs CPU code too)."""
    if cuda:
        return shutil.which("cuda-gdb") or ""
    return shutil.which("gdb") or shutil.which("cuda-gdb") or ""


@functools.lru_cache(maxsize=4)
def gdb_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.splitlines()[0].strip() if out else "?"


def helper_candidates(executable: str = sys.executable) -> list[str]:
    """Where python3.X-gdb.py is looked for: $DYNSTEP_PYTHON_GDB, next to the real interpreter
    (pyenv and python.org builds), next to libpython, and Debian's auto-load paths (python3.X-dbg)."""
    real = os.path.realpath(executable)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    found = [os.environ.get("DYNSTEP_PYTHON_GDB", ""), real + "-gdb.py",
             os.path.join(os.path.dirname(real), f"{ver}-gdb.py"),
             os.path.join(libdir, f"lib{ver}.so.1.0-gdb.py"),
             f"/usr/share/gdb/auto-load{real}-gdb.py", f"/usr/share/gdb/auto-load/usr/bin/{ver}-gdb.py",
             f"/usr/share/gdb/auto-load{libdir}/lib{ver}.so.1.0-gdb.py"]
    return list(dict.fromkeys(c for c in found if c))


def find_helper(executable: str = sys.executable) -> str:
    return next((c for c in helper_candidates(executable) if os.path.isfile(c)), "")


def helper_hint(executable: str = sys.executable) -> str:
    """How to get python3.X-gdb.py for this interpreter (what to run, not just that it is missing)."""
    real = os.path.realpath(executable)
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    if real.startswith("/usr/bin/"):
        return f"apt-get install python{ver}-dbg   (Debian/Ubuntu: puts python{ver}-gdb.py in gdb's auto-load path)"
    tag = f"v{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    return (f"{real} ships no python{ver}-gdb.py; take the one of its version from CPython's source:\n"
            f"    curl -fsSLo ~/python{ver}-gdb.py https://raw.githubusercontent.com/python/cpython/{tag}/Tools/gdb/"
            f"libpython.py && export DYNSTEP_PYTHON_GDB=~/python{ver}-gdb.py\n"
            "  (py-bt also needs the interpreter's debug symbols; without them gdb shows native frames only)")


def setup(cuda: bool = False, gdb: str | None = None) -> GdbSetup:
    path = gdb or find_gdb(cuda)
    return GdbSetup(gdb=path, version=gdb_version(path) if path else "", helper=find_helper(),
                    helper_hint=helper_hint(), commands=commands_file())


def command_file_text(s: GdbSetup) -> str:
    """The gdb command file: quiet settings, py-bt's helper, dynstep's commands."""
    lines = ["# written by `dynstep gdb`", *SETTINGS]
    lines.append(f"source {s.helper}" if s.helper else "# python3.X-gdb.py not found: native frames only (no py-bt)")
    lines.append(f"source {s.commands}")
    return "\n".join(lines) + "\n"


def gdb_argv(s: GdbSetup, command_file: str, inferior: Sequence[str], *, batch: bool, hits: int) -> list[str]:
    argv = [s.gdb, "-q"] + (["-batch"] if batch else [])
    # python3.X-gdb.py is loaded explicitly; without this gdb also tries (and refuses) to auto-load it
    argv += ["-iex", "set auto-load python-scripts off", "-x", command_file]
    argv += ["-ex", f"dynstep-run {hits}" if batch else "run"]
    return argv + ["--args", *inferior]


def inferior_argv(run_args: Sequence[str]) -> list[str]:
    """The program gdb starts: this Python running `dynstep run --native` with the user's options."""
    return [sys.executable, "-m", "dynstep", "run", "--native", *run_args]


def attach_command(pid: int) -> str:
    """The gdb command line that attaches to a running process with dynstep's commands loaded."""
    s = setup()
    parts = [s.gdb or "gdb", "-q", "-p", str(pid), "-iex", "set auto-load python-scripts off"]
    parts += (["-x", s.helper] if s.helper else []) + ["-x", s.commands]
    return shlex.join(parts)


def launch(run_args: Sequence[str], *, cuda: bool = False, debug_kernels: bool = False, batch: bool = False,
           hits: int = 1, gdb: str | None = None, dry_run: bool = False) -> tuple[bool, str, int]:
    """Run `dynstep run --native RUN_ARGS` under gdb; (ok, message, the program's exit code)."""
    s = setup(cuda, gdb)
    if not s.gdb:
        need = "cuda-gdb (CUDA toolkit: /usr/local/cuda/bin/cuda-gdb on PATH)" if cuda else \
            "gdb (apt-get install gdb, or cuda-gdb from the CUDA toolkit)"
        return False, f"dynstep gdb: no debugger found: install {need}, or name one with --gdb PATH", 2
    if not s.helper:
        print("dynstep gdb: python3.X-gdb.py not found (looked in: " + ", ".join(helper_candidates()) + "); gdb will "
              "show native frames only, no py-bt. To get it:\n  " + s.helper_hint, file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="dynstep-gdb-") as tmp:
        command_file = os.path.join(tmp, "commands.gdb")
        with open(command_file, "w", encoding="utf-8") as f:
            f.write(command_file_text(s))
        argv = gdb_argv(s, command_file, inferior_argv(run_args), batch=batch, hits=hits)
        status = os.path.join(tmp, "status")
        extra = {"DYNSTEP_GDB_STATUS": status}
        if debug_kernels:   # Inductor builds its C++ with -O0 -g: gdb lists the source, `next` steps lines
            extra["TORCHINDUCTOR_DEBUG_COMPILE"] = "1"
        if dry_run:
            return True, command_file_text(s) + shlex.join(["env", *(f"{k}={v}" for k, v in extra.items()), *argv]), 0
        code = _run(argv, {**os.environ, **extra})
        return _outcome(code, status)


def _run(argv: list[str], env: dict[str, str]) -> int:
    """gdb in the foreground: Ctrl-C is gdb's (it stops the program), SIGTERM is passed on to it."""
    proc = subprocess.Popen(argv, env=env, preexec_fn=_die_with_parent)
    def forward(signum: int, frame: object) -> None:
        proc.send_signal(signum)

    saved = {sig: signal.signal(sig, handler) for sig, handler in
             ((signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, forward), (signal.SIGHUP, forward))}
    try:
        return proc.wait()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _die_with_parent() -> None:
    """In the gdb child: SIGTERM when `dynstep gdb` dies (gdb then kills the program and exits)."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass   # not Linux: gdb still kills the program when it quits


def _outcome(gdb_code: int, status: str) -> tuple[bool, str, int]:
    try:
        with open(status, encoding="ascii") as f:
            code = int(f.read().strip())
    except (OSError, ValueError):
        code = gdb_code if gdb_code > 0 else 1
        return False, f"dynstep gdb: the program did not run to its end (gdb exited with {gdb_code} first)", code
    return code == 0, "", code


def die_with_debugger() -> None:
    """In the program under `dynstep gdb`: die with gdb (PR_SET_PDEATHSIG), so a killed gdb leaves
    no program behind (a traced process whose tracer dies is detached and runs on)."""
    if os.environ.get("DYNSTEP_GDB_STATUS") and sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
