"""The native build never hangs a process and always says what happened (issue 24 item 2, issue 26 item 4).

Every case runs real processes: a lock file left behind, a build killed midway, a live builder that
takes too long, a builder that finishes while another waits, an unwritable cache. A built library
from this test session's cache is copied into a fresh cache where a case needs one, so only the
killed build compiles anything.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dynstep.ops import buildlock, native, native_failures

PROBE = textwrap.dedent("""
    import sys, torch, dynstep
    from dynstep.ops import native
    f = torch.compile(lambda x: torch.tanh(x) * 2, backend="superstep",
                      options={"inner": "eager", "probe": ["op:tanh"], "actions": ["record"]})
    with dynstep.session() as s:
        for i in range(3):
            f(torch.full((2,), float(i)))
    print("hits", len(s.records()), "native", native.status().loaded, "|", native.status().reason)
""")


def built_library() -> Path:
    native.load()
    if not native.status().loaded:
        pytest.skip(f"no C++ toolchain to build the native kernel here: {native.status().reason}")
    return Path(native.status().path)


def cache_with_library(root: Path) -> Path:
    """A fresh cache holding a copy of this session's built library, where a process looks for it."""
    target = root / "native" / native.cache_dir().name / "cpu" / "dynstep_native.so"
    target.parent.mkdir(parents=True)
    shutil.copyfile(built_library(), target)
    return target


def env_for(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNSTEP_")}
    return {**env, "DYNSTEP_CACHE_DIR": str(cache), **extra}


def run_probe(env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=timeout, env=env)


def hold_lock(lock: Path, seconds: float, then_install: tuple[Path, Path] | None = None,
              release_when: Path | None = None) -> subprocess.Popen:
    """Another process holding the build lock (as a builder does) for `seconds` or until `release_when`
    exists, optionally putting a library in place before it lets go. Returns once the lock is held."""
    install = f"shutil.copyfile({str(then_install[0])!r}, {str(then_install[1])!r})" if then_install else "pass"
    go = str(release_when) if release_when else ""
    code = textwrap.dedent(f"""
        import os, shutil, sys, time
        from pathlib import Path
        from dynstep.ops.buildlock import BuildLock
        with BuildLock(Path({str(lock)!r}), wait=0, on_wait=lambda *a: None) as held:
            assert held.acquired
            print("held", flush=True)
            end = time.monotonic() + {seconds}
            while time.monotonic() < end and not ({go!r} and os.path.exists({go!r})):
                time.sleep(0.1)
            {install}
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_file_left_behind_is_not_waited_on(tmp_path):
    """`touch <cache>/native/<tag>/cpu.lock` (what a killed build leaves) used to hang every later run."""
    library = cache_with_library(tmp_path)
    (library.parent.parent / "cpu.lock").write_text("")
    (library.parent.parent / "lock").write_text("")       # torch's own lock name, from earlier versions
    start = time.monotonic()
    run = run_probe(env_for(tmp_path))
    assert run.returncode == 0, run.stderr
    assert "hits 3 native True" in run.stdout
    assert "waiting" not in run.stderr and time.monotonic() - start < 120


def test_a_build_killed_midway_does_not_block_the_next_process(tmp_path):
    """A real build is killed with SIGKILL while it holds the lock; the next process takes the lock at
    once (it fails fast here: CXX names no compiler) and says why it has no native kernel."""
    built_library()
    starter = subprocess.Popen([sys.executable, "-c", "from dynstep.ops import native; native.load()"],
                               env=env_for(tmp_path), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lock = tmp_path / "native" / native.cache_dir().name / "cpu.lock"
    deadline = time.monotonic() + 120
    while buildlock.read_holder(lock) is None:
        assert time.monotonic() < deadline and starter.poll() is None, "the build never took its lock"
        time.sleep(0.2)
    time.sleep(1.0)                                       # the compiler is running now
    os.killpg(starter.pid, signal.SIGKILL)
    starter.wait(timeout=30)
    run = run_probe(env_for(tmp_path, CXX="/nonexistent/c++", DYNSTEP_BUILD_WAIT="600"), timeout=300)
    assert run.returncode == 0, run.stderr
    assert "hits 3 native False" in run.stdout
    assert "build failed" in run.stdout and "waiting" not in run.stderr
    assert not list(lock.parent.glob(".build-cpu-*"))      # the killed build's folder was cleared


def test_a_live_builder_is_named_and_waited_for_only_so_long(tmp_path):
    lock = tmp_path / "native" / native.cache_dir().name / "cpu.lock"
    holder = hold_lock(lock, 120)
    try:
        start = time.monotonic()
        run = run_probe(env_for(tmp_path, DYNSTEP_BUILD_WAIT="2"))
        elapsed = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 0, run.stderr
    assert "hits 3 native False" in run.stdout                         # the Python kernel served every hit
    assert f"waiting for pid {holder.pid} on" in run.stderr and str(lock) in run.stderr
    assert "gave up waiting" in run.stderr and "DYNSTEP_BUILD_WAIT" in run.stderr
    assert elapsed < 100


def test_a_process_waiting_for_a_builder_loads_what_it_built(tmp_path):
    source = built_library()
    target = tmp_path / "native" / native.cache_dir().name / "cpu" / "dynstep_native.so"
    target.parent.mkdir(parents=True)
    go = tmp_path / "go"
    holder = hold_lock(target.parent.parent / "cpu.lock", 240, then_install=(source, target), release_when=go)
    prober = subprocess.Popen([sys.executable, "-c", PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env_for(tmp_path))
    assert prober.stderr is not None
    waiting = prober.stderr.readline()            # the one line a waiting process prints
    go.write_text("")                             # now the builder finishes and lets go
    out, err = prober.communicate(timeout=240)
    holder.wait(timeout=60)
    assert prober.returncode == 0, waiting + err
    assert f"waiting for pid {holder.pid}" in waiting
    assert "hits 3 native True" in out and "building" not in err


def test_an_unwritable_cache_ends_at_once_with_a_clear_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    run = run_probe(env_for(blocker / "cache"), timeout=120)
    assert run.returncode == 0, run.stderr
    assert "hits 3 native False" in run.stdout and "not writable" in run.stdout


def test_the_cache_folder_depends_on_the_sources_content_not_their_path(tmp_path, monkeypatch):
    """Two checkouts with equal sources share one library (they used to rebuild each other in turn)."""
    copy = tmp_path / "csrc"
    shutil.copytree(native.CSRC, copy)
    here = native.cache_dir()
    monkeypatch.setattr(native, "CSRC", copy)
    assert native.cache_dir() == here
    (copy / native.SOURCES[0]).write_text((copy / native.SOURCES[0]).read_text() + "\n// changed\n")
    assert native.cache_dir() != here


@pytest.mark.parametrize("output,cause", [
    ("RuntimeError: Ninja is required to load C++ extensions", "ninja is not installed"),
    ("/bin/sh: 1: c++: not found", "no C++ compiler"),
    ("fatal error: Python.h: No such file or directory", "Python development headers"),
    ("fatal error: cuda_runtime_api.h: No such file or directory", "CUDA toolkit's headers"),
    ("probe_cpu.cpp:12:3: error: 'foo' was not declared in this scope", "error: 'foo' was not declared"),
])
def test_doctor_names_the_cause_of_a_build_failure_and_the_fix(output, cause):
    status = native_failures.failed("cpu", "noise\n" + output + "\nmore noise", Path("/x/cpu/lib.so"))
    assert cause in status.reason and status.fix


def test_a_cuda_torch_without_a_visible_device_builds_the_cpu_kernel(monkeypatch):
    """A CUDA torch on a login node or CI box: no device and no TORCH_CUDA_ARCH_LIST used to make
    torch's arch detection raise IndexError and leave only the Python kernel."""
    import torch

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(native, "cuda_home", lambda: "/usr/local/cuda")
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    assert not native.with_cuda() and native._variants() == ["cpu"]
    assert "no CUDA device is visible" in native.cuda_reason()
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    assert native.with_cuda() and native._variants() == ["cuda", "cpu"]


def test_cuda_headers_are_found_behind_an_nvcc_wrapper_script(tmp_path, monkeypatch):
    """nvcc on PATH as a shell wrapper (/usr/local/bin/nvcc: exec /opt/cuda-x/bin/nvcc "$@"): torch
    derives CUDA_HOME=/usr/local from it, which has no CUDA headers."""
    toolkit = tmp_path / "cuda-x"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    (toolkit / "bin").mkdir()
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {toolkit}/bin/nvcc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", str(wrapper.parent))
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    if Path("/usr/local/cuda/include/cuda_runtime.h").is_file():
        assert native.cuda_home() == "/usr/local/cuda"     # torch's own default comes first
    else:
        assert native.cuda_home() == str(toolkit)
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    assert native.cuda_home() == str(toolkit)
