"""`dynstep vscode [--cpp]`: launch configurations for VS Code, merged into .vscode/launch.json.

    dynstep vscode --cpp --pause "module:blocks.0.mlp" --script train.py

Writes (replacing only dynstep's own entries, by name; the user's entries stay as they are):
- "dynstep: Python (debugpy)": the script under `dynstep run --native --frontend pdb`, so a stop
  is a VS Code breakpoint with `value` in the locals (`dynstep_cmd("native break")` works there);
- with --cpp, "dynstep: C++ (gdb attach)": a cppdbg attach to the same Python process with the
  py-bt helper and dynstep's gdb commands loaded — the pairing the seeds' VS Code guide builds by
  hand; `native break` in the Python session then stops the C++ session in the node's kernel;
- "dynstep: attach (DAP)" when this dynstep serves the Debug Adapter Protocol (`dynstep run --dap`).

launch.json is JSON with comments; it is read tolerantly (comments, trailing commas). A file it
cannot read is never written over: the message says so. Comments of a rewritten file are not kept;
its previous text is saved next to it (launch.json.bak).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .gdb_launch import commands_file, find_gdb, find_helper

PREFIX = "dynstep: "
DAP_PORT = 5679   # `dynstep run --dap 5679` (docs/vscode.md)


def configurations(*, cpp: bool, script: str, pauses: tuple[str, ...], dap: bool = False) -> list[dict[str, Any]]:
    args = ["run", "--native", "--frontend", "pdb"] + [a for p in pauses for a in ("--pause", p)] + [script]
    out: list[dict[str, Any]] = [{
        "name": PREFIX + "Python (debugpy)", "type": "debugpy", "request": "launch", "python": sys.executable,
        "module": "dynstep", "args": args, "console": "integratedTerminal", "justMyCode": False}]
    if cpp:
        setup = [{"description": "pretty printing", "text": "-enable-pretty-printing", "ignoreFailures": True},
                 {"description": "pending breakpoints", "text": "set breakpoint pending on", "ignoreFailures": True}]
        helper = find_helper()
        if helper:
            setup.append({"description": "Python frames (py-bt)", "text": f"source {helper}", "ignoreFailures": True})
        setup.append({"description": "dynstep-node, dynstep-bt", "text": f"source {commands_file()}",
                      "ignoreFailures": True})
        out.append({"name": PREFIX + "C++ (gdb attach)", "type": "cppdbg", "request": "attach",
                    "program": os.path.realpath(sys.executable), "processId": "${command:pickProcess}",
                    "MIMode": "gdb", "miDebuggerPath": find_gdb() or "gdb", "setupCommands": setup})
    if dap:
        # the `dynstep` debug type comes with editors/vscode (docs/vscode.md)
        out.append({"name": PREFIX + "attach (DAP)", "type": "dynstep", "request": "attach",
                    "host": "127.0.0.1", "port": DAP_PORT})
    return out


def write_launch_json(folder: str, *, cpp: bool, script: str = "${file}", pauses: tuple[str, ...] = (),
                      dap: bool = False) -> tuple[bool, str]:
    """Merge dynstep's configurations into FOLDER/.vscode/launch.json; (ok, what was done)."""
    path = os.path.join(folder, ".vscode", "launch.json")
    text = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
    try:
        data = loads_jsonc(text) if text.strip() else {"version": "0.2.0", "configurations": []}
    except ValueError as exc:
        return False, (f"dynstep vscode: cannot read {path} ({exc}); it was left as it is. Fix it (or move it "
                       "away) and run dynstep vscode again")
    if not isinstance(data, dict) or not isinstance(data.get("configurations", []), list):
        return False, f"dynstep vscode: {path} has no \"configurations\" list; it was left as it is"
    merged, added, updated = merge(data, configurations(cpp=cpp, script=script, pauses=pauses, dap=dap))
    if merged == data and text.strip():
        return True, f"{path}: already up to date ({len(merged['configurations'])} configurations)"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if text.strip() and text.strip() != json.dumps(data, indent=4):
        with open(path + ".bak", "w", encoding="utf-8") as f:
            f.write(text)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(merged, indent=4) + "\n")
    os.replace(path + ".tmp", path)
    kept = len(merged["configurations"]) - len(added) - len(updated)
    return True, (f"{path}: added {', '.join(added) or 'nothing'}; updated {', '.join(updated) or 'nothing'}; "
                  f"kept {kept} other configuration(s)")


def merge(data: dict[str, Any], ours: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str], list[str]]:
    """data with our configurations replacing same-named ones in place, the rest appended."""
    configs = [dict(c) for c in data.get("configurations", [])]
    names = [c.get("name") for c in configs]
    added, updated = [], []
    for config in ours:
        if config["name"] in names:
            i = names.index(config["name"])
            if configs[i] != config:
                configs[i] = config
                updated.append(config["name"])
        else:
            configs.append(config)
            added.append(config["name"])
    return {"version": data.get("version", "0.2.0"), **data, "configurations": configs}, added, updated


def loads_jsonc(text: str) -> Any:
    """JSON with // and /* */ comments and trailing commas (what VS Code accepts); ValueError otherwise."""
    return json.loads(_drop_trailing_commas(_drop_comments(text)))


def _drop_comments(text: str) -> str:
    out, i, n, in_string = [], 0, len(text), False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError("a /* comment is never closed")
            i = end + 2
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _drop_trailing_commas(text: str) -> str:
    out, in_string, escaped = [], False, False
    for i, ch in enumerate(text):
        if in_string:
            in_string = escaped or ch != '"'
            escaped = not escaped and ch == "\\"
        elif ch == '"':
            in_string = True
        elif ch == ",":
            rest = text[i + 1:].lstrip()
            if rest[:1] in ("}", "]"):
                continue
        out.append(ch)
    return "".join(out)
