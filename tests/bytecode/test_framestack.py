"""dynstep's native value-stack reader (csrc/frame_stack.c, dynstep/bytecode/framestack.py) against
known stacks: plain functions stopped mid-expression through the stepper's own instruction events,
NULL slots included, on this Python in-process and on every other CPython 3.11-3.13 found here in a
subprocess (built with that interpreter's headers; no torch needed). Then its refusals: an
unverified Python version, missing headers, a failing compiler, DYNSTEP_NATIVE_STACK=0."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynstep.bytecode import code as code_module
from dynstep.bytecode import framestack, tracing

from . import interp_check

HERE = sys.version_info[:2]
OTHERS = [v for v in framestack.VERIFIED if v != HERE]


def _ok(report: dict) -> list[str]:
    """The failed checks, with what was read."""
    return [f"{name}: {detail}" for name, (ok, detail) in report["checks"].items() if not ok]


def test_native_reader_reads_known_stacks_on_this_python():
    report = interp_check.run_checks(framestack, code_module, tracing)
    assert report["built"], report
    assert len(report["checks"]) >= 8 and _ok(report) == []
    assert framestack.status().loaded and f"CPython {HERE[0]}.{HERE[1]}" in report["layout"]


def find_python(version: tuple[int, int]) -> str | None:
    """A working interpreter of that version: DYNSTEP_TEST_PYTHONS, PATH, pyenv's versions, /usr/bin."""
    name = f"python{version[0]}.{version[1]}"
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [p for p in os.environ.get("DYNSTEP_TEST_PYTHONS", "").split(os.pathsep) if p]
    candidates += [shutil.which(name) or "", *sorted(glob.glob(os.path.join(root, "versions", "*", "bin", name))),
                   f"/usr/bin/{name}"]
    for path in candidates:
        if not path or not os.access(path, os.X_OK):
            continue
        try:   # pyenv's shims exist for versions that are not selected, and fail
            out = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                 text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0 and out.stdout.strip() == str(version):
            return path
    return None


@pytest.mark.parametrize("version", OTHERS, ids=[f"{a}.{b}" for a, b in OTHERS])
def test_native_reader_reads_known_stacks_on_another_python(version, tmp_path):
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} interpreter here (set DYNSTEP_TEST_PYTHONS to one)")
    env = {**os.environ, "DYNSTEP_CACHE_DIR": str(tmp_path)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([python, str(Path(interp_check.__file__))], capture_output=True, text=True, env=env,
                          timeout=300)
    report = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    assert report.get("built"), (proc.stderr, report)
    assert _ok(report) == [], report
    assert proc.returncode == 0 and report["python"].startswith(f"{version[0]}.{version[1]}.")
    assert report["events"] == ("sys.monitoring" if version >= (3, 12) else "settrace")
    assert str(tmp_path) in report["status"]          # built there, with that interpreter's headers


def test_an_unverified_python_is_refused_by_name():
    why = framestack.unsupported_python((3, 14))
    assert why is not None and "Python 3.14" in why and "not verified" in why and "3.11, 3.12, 3.13" in why
    assert framestack.unsupported_python(HERE) is None


def test_the_c_file_itself_refuses_a_layout_it_does_not_know(tmp_path):
    """Compiled against an older Python's headers it stops with its own message (when one is here)."""
    python = find_python((3, 10))
    if python is None:
        pytest.skip("no Python 3.10 interpreter here to compile against")
    include = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                             capture_output=True, text=True).stdout.strip()
    proc = subprocess.run(["cc", "-fsyntax-only", f"-I{include}", str(framestack.SOURCE)], capture_output=True,
                          text=True)
    assert proc.returncode != 0
    assert "interpreter frame layout of this CPython version is not verified (3.11-3.13 are)" in proc.stderr


def test_missing_headers_a_failing_compiler_and_no_cache_are_reported_not_raised(monkeypatch, tmp_path):
    monkeypatch.setattr(framestack, "_include_dirs", lambda: [str(tmp_path)])
    why = framestack.build(tmp_path / "x.so")
    assert why is not None and "internal headers are missing" in why and f"python{HERE[0]}.{HERE[1]}-dev" in why
    monkeypatch.undo()
    monkeypatch.setattr(framestack, "_compile_command",
                        lambda output, includes: [str(tmp_path / "no-such-cc"), "-o", str(output)])
    why = framestack.build(tmp_path / "x.so")
    assert why is not None and why.startswith("build failed (FileNotFoundError")
    assert not (tmp_path / "x.so").exists()
    (tmp_path / "a-file").write_text("")
    why = framestack.build(tmp_path / "a-file" / "cache" / "x.so")      # root can write anywhere else
    assert why is not None and "is not writable" in why and "DYNSTEP_CACHE_DIR" in why


def test_switched_off_it_says_so_and_read_raises_with_the_reason(monkeypatch):
    monkeypatch.setenv("DYNSTEP_NATIVE", "0")          # the probe kernel's switch is not this one's
    monkeypatch.setattr(framestack, "_tried", False)
    monkeypatch.setattr(framestack, "_module", None)
    assert framestack.load() is not None, framestack.status()
    monkeypatch.setenv("DYNSTEP_NATIVE_STACK", "0")
    monkeypatch.setattr(framestack, "_tried", False)
    monkeypatch.setattr(framestack, "_module", None)
    monkeypatch.setattr(framestack, "_status", framestack.FrameStackStatus(False, "not loaded yet"))
    assert framestack.load() is None and framestack.status().reason == "disabled by DYNSTEP_NATIVE_STACK=0"
    with pytest.raises(framestack.FrameStackUnavailable, match="disabled by DYNSTEP_NATIVE_STACK=0"):
        framestack.read(sys._getframe(), 1)


def test_bad_arguments_are_errors_not_crashes():
    module = framestack.load()
    assert module is not None, framestack.status()
    with pytest.raises(TypeError, match="needs a frame object"):
        module.value_stack(object(), 1)
    with pytest.raises(ValueError, match="depth must be >= 0"):
        module.value_stack(sys._getframe(), -1)
