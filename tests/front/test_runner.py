"""`dynstep run` through a subprocess (the real CLI), and `routed_compile` in process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import sys
    import torch

    def f(x):
        return torch.sin(x) + 1

    out = torch.compile(f, backend="eager")(torch.zeros(3))
    print("argv", sys.argv[1:], "name", __name__)
    print("out", out.tolist())
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
""")


def dynstep(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache")}
    for key in ("DYNSTEP_COMMANDS", "DYNSTEP_PAUSE", "DYNSTEP_FRONTEND"):
        env.pop(key, None)
    return subprocess.run([sys.executable, "-m", "dynstep", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_exit_code_argv_and_stdout_are_the_scripts(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    result = dynstep("run", str(script), "3", "--flag")
    assert result.returncode == 3, result.stderr
    assert result.stdout == "argv ['3', '--flag'] name __main__\nout [1.0, 1.0, 1.0]\n"


def test_commands_reach_the_compiled_graph_and_output_stays_on_stderr(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    result = dynstep("run", "--pause", "op:sin", "--commands", "p value.sum(); set value = value - 1; c", str(script))
    assert result.returncode == 0, result.stderr
    assert "out [0.0, 0.0, 0.0]" in result.stdout          # sin(0) + 1 became (sin(0) - 1) + 1
    assert "(dynstep)" not in result.stdout
    assert "value.sum() = tensor(0.)" in result.stderr


def test_run_module_and_no_terminal_never_hangs(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(SCRIPT)
    result = dynstep("run", "--pause", "op:sin", "-m", "mypkg.train", "0", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "out [1.0, 1.0, 1.0]" in result.stdout
    assert result.stderr.count("stdin is not a terminal") == 1


def test_quit_is_a_clean_abort_with_exit_code_1(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    result = dynstep("run", "--pause", "op:sin", "--commands", "q", str(script))
    assert result.returncode == 1
    assert "quit at node sin" in result.stderr and "Traceback" not in result.stderr
    assert "out" not in result.stdout


def test_routed_compile_keeps_backend_as_inner_and_restores_torch_compile():
    from dynstep.front.runner import routed_compile

    original = torch.compile
    inner_seen = []

    def my_backend(gm, example_inputs):
        inner_seen.append(gm)
        return gm.forward

    with routed_compile({"probe": ["op:relu"], "actions": ["print"]}):
        assert torch.compile is not original
        fn = torch.compile(lambda x: torch.relu(x) * 2, backend=my_backend)
        fn(torch.randn(3))
    assert torch.compile is original
    (gm,) = inner_seen
    assert any(n.target is torch.ops.dynstep.probe.default for n in gm.graph.nodes)


def test_pdb_front_end_without_a_terminal_runs_to_the_end(tmp_path):
    """Issue 14 item 12: `--frontend pdb` with no terminal ended in a 48-frame BdbQuit traceback."""
    (tmp_path / "s.py").write_text(SCRIPT)
    run = dynstep("run", "--frontend", "pdb", "--pause", "op:sin", str(tmp_path / "s.py"), "5")
    assert run.returncode == 5, run.stderr
    assert "needs a terminal" in run.stderr and "Traceback" not in run.stderr and "BdbQuit" not in run.stderr


def test_rebinding_value_to_a_non_tensor_in_the_debugger_is_refused_not_fatal(tmp_path):
    """Issue 14 item 12: `value = "abc"` in pdb used to kill the program."""
    hook = tmp_path / "hook.py"
    hook.write_text("import sys\ndef bp():\n    sys._getframe(1).f_locals['value'] = 'abc'\n")
    (tmp_path / "s.py").write_text(SCRIPT)
    env_run = subprocess.run([sys.executable, "-m", "dynstep", "run", "--frontend", "pdb", "--pause", "op:sin",
                              str(tmp_path / "s.py")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONBREAKPOINT": "hook.bp",
                                  "PYTHONPATH": os.pathsep.join([ROOT, str(tmp_path)])}, stdin=subprocess.DEVNULL)
    assert env_run.returncode == 0, env_run.stderr
    assert "cannot write a str" in env_run.stderr and "out [1.0, 1.0, 1.0]" in env_run.stdout
