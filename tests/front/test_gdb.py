"""`dynstep gdb` for real: a small transformer under Inductor, stopped at a node, `native break`,
gdb stopped inside that node's generated kernel with the Python stack and the user's line; the
script's exit code kept; no process left behind when gdb quits or `dynstep gdb` is killed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dynstep.front import gdb_launch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt-get install gdb)")

SCRIPT = textwrap.dedent("""
    import os, sys
    import torch
    from dynstep.front.demo.model import make

    model, idx = make(layers=1)
    model.eval()
    compiled = torch.compile(model)
    print("pid", os.getpid(), flush=True)
    with torch.no_grad():
        for step in range(2):
            out = compiled(idx)
    print("finished", flush=True)
    sys.exit(3)
""")


def env(**extra: str) -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache"),
           **extra}
    for key in ("DYNSTEP_COMMANDS", "DYNSTEP_PAUSE", "DYNSTEP_FRONTEND", "DYNSTEP_GDB_STATUS"):
        out.pop(key, None)
    return out


def dynstep(*args: str, cwd: str, timeout: int = 300, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynstep", *args], cwd=cwd, env=env(**extra), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return open(f"/proc/{pid}/stat").read().split()[2] == "Z"   # a zombie is reaped by its parent, not orphaned


@needs_gdb
def test_batch_stops_in_the_nodes_generated_kernel_with_python_stack_and_exit_code(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    r = dynstep("gdb", "--batch", "--pause", "node:h", "--commands", "native; native break", "train.py",
                cwd=str(tmp_path), DYNSTEP_GDB_AT_HIT="info symbol $pc")
    out = r.stdout + r.stderr
    assert r.returncode == 3, out[-4000:]
    assert "==== dynstep breakpoint hit 1" in out and "the program exited with code 3" in out
    hit = out[out.index("==== dynstep breakpoint hit 1"):]
    library = re.search(r"\[dynstep\]   library\s+(\S+\.so)", hit).group(1)
    kernel = re.search(r"\[dynstep\]   kernel\s+(\S+) \(cpp\)", hit).group(1)
    assert kernel.startswith("cpp_fused_") and "gelu" in kernel
    assert re.search(r"^kernel in section \.text of " + re.escape(library) + "$", hit, re.M)   # info symbol $pc
    assert re.search(r"^#0  kernel \(\) at " + re.escape(library[:-3]) + r"\.cpp:\d+", hit, re.M)
    assert os.path.basename(library) in r.stderr                     # `native` (the REPL, on stderr) named it first
    assert "source      model.py:44  h = F.gelu(self.fc(x))" in hit                   # the user's line
    assert "---- python (py-bt) ----" in hit
    assert re.search(r'File ".*/dynstep/front/demo/model.py", line \d+, in forward', hit)
    assert re.search(r'File "[^"]*train.py", line 12, in <module>', hit)                 # the script's own call
    assert re.search(r"line \d+, in call\n\s+" + re.escape(kernel) + r"\(", hit)         # the wrapper's launch line
    assert "finished" in r.stdout


@needs_gdb
def test_interactive_session_and_quitting_gdb_leaves_no_process(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    (tmp_path / "train.py").write_text(SCRIPT)
    child = pexpect.spawn(sys.executable, ["-m", "dynstep", "gdb", "--pause", "node:h", "train.py"], cwd=str(tmp_path),
                          env=env(TERM="dumb"), encoding="utf-8", timeout=240, dimensions=(40, 200))
    child.expect(r"pid (\d+)")
    pid = int(child.match.group(1))
    child.expect(r"\(dynstep\) ")
    child.sendline("native break")
    child.expect(r"`continue` runs on to the kernel")
    child.expect(r"\(gdb\) ")
    child.sendline("continue")
    child.expect(r"\[dynstep\]   node\s+h\r?\n")         # gdb stopped in the kernel and said which node
    child.expect(r"\(gdb\) ")
    child.sendline("py-bt")
    child.expect(r"train.py\", line 12, in <module>")
    child.expect(r"\(gdb\) ")
    child.sendline("quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus not in (0, 3, None)              # the script did not run to its end
    assert "did not run to its end" in child.before
    deadline = time.time() + 10
    while not gone(pid) and time.time() < deadline:
        time.sleep(0.2)
    assert gone(pid)


@needs_gdb
def test_killing_dynstep_gdb_kills_gdb_and_the_program(tmp_path):
    (tmp_path / "sleeper.py").write_text("import os, time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(120)\n")
    launcher = subprocess.Popen([sys.executable, "-m", "dynstep", "gdb", "--batch", "sleeper.py"], cwd=str(tmp_path),
                                env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = ""
    while not line.startswith("pid "):
        line = launcher.stdout.readline()
        assert line or launcher.poll() is None
    pid = int(line.split()[1])
    gdb = [int(p) for p in subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True,
                                          text=True).stdout.split()]
    launcher.send_signal(signal.SIGTERM)
    launcher.wait(timeout=30)
    deadline = time.time() + 10
    while not all(gone(p) for p in (pid, *gdb)) and time.time() < deadline:
        time.sleep(0.2)
    assert gdb and all(gone(p) for p in (pid, *gdb))


def test_native_break_without_a_debugger_keeps_the_scripts_exit_code(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    r = dynstep("run", "--inner", "eager", "--pause", "node:h", "--commands", "native break; c", "train.py",
                cwd=str(tmp_path))
    assert r.returncode == 3, r.stderr[-3000:]
    assert "no trap (no debugger is attached (TracerPid 0))" in r.stderr and "finished" in r.stdout
    assert "dynstep gdb" in r.stderr and "break *0x" in r.stderr


def test_missing_gdb_is_a_clear_message(tmp_path):
    r = dynstep("gdb", "train.py", cwd=str(tmp_path), PATH=str(tmp_path))
    assert r.returncode == 2 and "no debugger found: install gdb (apt-get install gdb" in r.stderr


@needs_gdb
def test_dry_run_shows_the_command_file_and_a_missing_helper_says_how_to_get_it(monkeypatch, capsys):
    monkeypatch.setattr(gdb_launch, "find_helper", lambda executable=sys.executable: "")
    ok, text, code = gdb_launch.launch(["--pause", "node:h", "train.py"], batch=True, dry_run=True,
                                       debug_kernels=True)
    warning = capsys.readouterr().err
    assert ok and code == 0 and "python3.X-gdb.py not found" in warning and "native frames only" in warning
    assert "curl" in warning or "apt-get install" in warning
    assert "set pagination off" in text and f"source {gdb_launch.commands_file()}" in text
    assert "-iex 'set auto-load python-scripts off'" in text and "-ex 'dynstep-run 1'" in text
    assert "TORCHINDUCTOR_DEBUG_COMPILE=1" in text and "DYNSTEP_GDB_STATUS=" in text       # --debug-kernels
    assert text.rstrip().endswith("-m dynstep run --native --pause node:h train.py")
