"""`dynstep vscode`: merged into .vscode/launch.json, the user's entries kept, idempotent, and a file
it cannot read left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from dynstep.front import vscode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

USERS = """{
    // Use IntelliSense to learn about possible attributes.
    "version": "0.2.0",
    "configurations": [
        {
            "name": "Python: current file",   // the user's own
            "type": "debugpy",
            "request": "launch",
            "program": "${file}", /* inline */
        },
    ],
    "compounds": [],
}
"""


def launch_json(folder) -> dict:
    with open(os.path.join(folder, ".vscode", "launch.json")) as f:
        return json.load(f)


def test_merges_keeps_the_users_entries_and_is_idempotent(tmp_path):
    (tmp_path / ".vscode").mkdir()
    (tmp_path / ".vscode" / "launch.json").write_text(USERS)
    ok, message = vscode.write_launch_json(str(tmp_path), cpp=True, script="train.py", pauses=("node:h",))
    assert ok and "added dynstep: Python (debugpy), dynstep: C++ (gdb attach)" in message
    data = launch_json(tmp_path)
    names = [c["name"] for c in data["configurations"]]
    assert names == ["Python: current file", "dynstep: Python (debugpy)", "dynstep: C++ (gdb attach)"]
    assert data["configurations"][0]["program"] == "${file}" and data["compounds"] == []
    python, cpp = data["configurations"][1:]
    assert python["module"] == "dynstep" and python["args"] == ["run", "--native", "--frontend", "pdb", "--pause",
                                                                "node:h", "train.py"]
    assert cpp["type"] == "cppdbg" and cpp["request"] == "attach" and cpp["processId"] == "${command:pickProcess}"
    assert cpp["program"] == os.path.realpath(sys.executable)
    assert any("gdb_commands.py" in c["text"] for c in cpp["setupCommands"])
    assert (tmp_path / ".vscode" / "launch.json.bak").read_text() == USERS     # comments: the original is kept
    before = (tmp_path / ".vscode" / "launch.json").read_text()
    ok, message = vscode.write_launch_json(str(tmp_path), cpp=True, script="train.py", pauses=("node:h",))
    assert ok and "already up to date" in message
    assert (tmp_path / ".vscode" / "launch.json").read_text() == before


def test_a_changed_entry_of_ours_is_updated_in_place(tmp_path):
    vscode.write_launch_json(str(tmp_path), cpp=False, script="a.py")
    ok, message = vscode.write_launch_json(str(tmp_path), cpp=False, script="b.py")
    assert ok and "updated dynstep: Python (debugpy)" in message
    assert [c["args"][-1] for c in launch_json(tmp_path)["configurations"]] == ["b.py"]


def test_an_unreadable_file_is_never_written_over(tmp_path):
    (tmp_path / ".vscode").mkdir()
    broken = '{"configurations": [ {"name": "x",, } '
    (tmp_path / ".vscode" / "launch.json").write_text(broken)
    ok, message = vscode.write_launch_json(str(tmp_path), cpp=True)
    assert not ok and "cannot read" in message and "left as it is" in message
    assert (tmp_path / ".vscode" / "launch.json").read_text() == broken


def test_jsonc_reader_keeps_comment_markers_inside_strings():
    assert vscode.loads_jsonc('{"a": "http://x/*y*/", // c\n "b": [1, 2,],}') == {"a": "http://x/*y*/", "b": [1, 2]}


def test_the_cli_verb(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dynstep", "vscode", "--cpp", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr
    configs = launch_json(tmp_path)["configurations"]
    assert "launch.json: added" in r.stdout and len(configs) == 3
    attach = next(c for c in configs if c["name"] == "dynstep: attach (DAP)")   # dynstep run --dap serves it
    assert attach["type"] == "dynstep" and attach["request"] == "attach" and attach["port"] == 5679
