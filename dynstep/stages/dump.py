"""`dynstep run --dump DIR`: every stage of every compile of the run as files an editor opens.

    DIR/index.json                          what is where: per file its compile, stage and, per line, the
                                            FX nodes and the user's line it stands for
    DIR/index.txt                           the same as a table, for a terminal
    DIR/0_0-forward/dynamo.py               Dynamo's FX graph (`# File: model.py:33 ...` heads each user line)
    DIR/0_0-forward/aot.py, aot-backward.py, joint.py
    DIR/0_0-forward/post-grad.py, post-grad-backward.py
    DIR/0_0-forward/inductor.py, inductor-backward.py    Inductor's output code; every kernel launch
                                            ends in ``# dynstep: <nodes> · <file:line>  <the line's text>``
                                            (line numbers stay those of the wrapper module that runs)
    DIR/0_0-forward/bytecode.py             the code Dynamo wrote for the frame, as Python
    DIR/0_0-forward/aot#1.py ...            a second text of a stage (superstep's variant with stop points)

The folder must be absent, empty, or an earlier dump (its index.json says so): dynstep never writes
over files it did not write, and replaces an earlier dump's files only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.errors import StorageError
from .annotate import note_of
from .capture import STAGES
from .stage import Stage
from .view import marks_for, stages_of

FORMAT = "dynstep dump"
VERSION = 1


def check_folder(folder: str | os.PathLike[str]) -> Path:
    """The dump folder, usable (absent, empty, or an earlier dump); StorageError saying why not."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise StorageError(f"--dump {path}: it is a file; give a folder (absent, empty, or an earlier dump)")
    if path.is_dir() and any(path.iterdir()) and _earlier(path) is None:
        raise StorageError(f"--dump {path}: the folder holds files dynstep did not write (no {FORMAT} index.json); "
                           "give an empty or new folder")
    return path


def _earlier(path: Path) -> list[str] | None:
    try:
        index = json.loads((path / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        return None
    return [f["file"] for f in index.get("files", []) if isinstance(f, dict) and isinstance(f.get("file"), str)]


def write_dump(folder: str | os.PathLike[str]) -> list[Path]:
    """Write every captured stage into `folder` (see the module docstring); returns the files written."""
    path = check_folder(folder)
    for old in [*(_earlier(path) or []), "index.json", "index.txt"]:   # only what an earlier dump wrote
        target = (path / old).resolve()
        if path.resolve() in target.parents and target.is_file():
            target.unlink()
    entries, written = [], []
    for compile_id in STAGES.compile_ids():
        for stage in stages_of(compile_id):
            name = stage.name + (f"#{stage.variant}" if stage.variant else "")
            rel = f"{_folder_name(compile_id, STAGES.function_of(compile_id) or stage.function)}/{name}.py"
            marks = marks_for(stage, compile_id)
            text = annotated_text(stage, compile_id, marks)
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            (path / rel).write_text(text, encoding="utf-8")
            written.append(path / rel)
            entries.append({"file": rel, "compile_id": compile_id, "stage": stage.name, "variant": stage.variant,
                            "function": stage.function, "title": stage.title, "runs_as": stage.path,
                            "lines": {str(m.line): {"nodes": list(m.nodes), "source": m.source} for m in marks}})
    _write_index(path, entries)
    return written


def _folder_name(compile_id: str, function: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "_-." else "_" for ch in function)
    return compile_id.replace("/", "_").replace("!", "ca") + (f"-{safe}" if safe else "")


def annotated_text(stage: Stage, compile_id: str, marks: tuple | None = None) -> str:
    """The stage's text; Inductor's code with each kernel launch ending in the nodes and user line it
    computes (line numbers unchanged: they stay those of the wrapper module that runs)."""
    if not stage.name.startswith("inductor"):
        return stage.text
    marks = marks_for(stage, compile_id) if marks is None else marks
    lines = stage.text.splitlines()
    for mark in marks:
        if 0 < mark.line <= len(lines) and note_of(mark):
            lines[mark.line - 1] += f"  # dynstep: {note_of(mark)}"
    return "\n".join(lines) + "\n"


def _write_index(path: Path, entries: list[dict]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "index.json").write_text(json.dumps({"format": FORMAT, "version": VERSION, "files": entries}, indent=1),
                                     encoding="utf-8")
    rows = [f"{'compile':<10} {'stage':<20} {'function':<28} file"]
    rows += [f"{e['compile_id']:<10} {e['stage'] + ('#' + str(e['variant']) if e['variant'] else ''):<20} "
             f"{e['function']:<28} {e['file']}" for e in entries]
    (path / "index.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
