"""`dynstep compare` on real recordings of two processes: the same GPT-2 script, recorded with
`dynstep run --probe '*' --record`, once as it is and once with planted changes (one module's
activation changed, one layer added, a line inserted above the activation so every line below
shifts). And, when a second Python with another torch is given (DYNSTEP_OTHER_TORCH_PYTHON), the
same script recorded under both torch versions: no false divergence."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..conftest import OTHER_TORCH_PYTHON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2_script.py")
MARK = "        h = self.act(h)  # ACTIVATION LINE"


def variant(folder) -> str:
    """gpt2_script.py with the planted changes, under the same file name in another folder."""
    text = open(SCRIPT, encoding="utf-8").read()
    planted = (text.replace("N_LAYER = 2\n", "N_LAYER = 3\n")
               .replace("ACT: dict[int, str] = {}", 'ACT: dict[int, str] = {1: "relu"}')
               .replace(MARK, "        # a line inserted above the activation: every line below shifts\n" + MARK))
    assert planted.count("N_LAYER = 3") == 1 and planted.count("# a line inserted") == 1
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "gpt2_script.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(planted)
    return path


def record(script: str, recording, *, tensors: bool, python: str = sys.executable) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT, DYNSTEP_ACTIONS="summary,record" if tensors else "summary")
    run = subprocess.run([python, "-m", "dynstep", "run", "--probe", "*", "--record", str(recording), script, "2"],
                         cwd=os.path.dirname(script), env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and "step 1:" in run.stdout, run.stdout + run.stderr[-3000:]


def compare(*args: str, cwd):
    return subprocess.run([sys.executable, "-m", "dynstep", "compare", *args], cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    record(SCRIPT, folder / "a.dynstep", tensors=True)
    return folder


@pytest.fixture(scope="module")
def recordings(run_a):
    folder = run_a
    record(variant(str(folder / "planted")), folder / "b.dynstep", tensors=True)
    record(SCRIPT, folder / "again.dynstep", tensors=False)
    return folder


def test_the_planted_module_is_named_across_two_processes(recordings):
    run = compare("a.dynstep", "b.dynstep", "--json", "--html", "cmp.html", cwd=recordings)
    assert run.returncode == 1, run.stdout + run.stderr
    data = json.loads(run.stdout)
    first = data["first_divergence"]
    assert first["module"] == "transformer.h.1.mlp.act" and first["compared"] == "values", first
    assert (first["a"]["op"], first["b"]["op"]) == ("torch.nn.functional.gelu", "torch.nn.functional.relu")
    a_line, b_line = (int(first[side]["source"].rsplit(":", 1)[1]) for side in ("a", "b"))
    assert b_line == a_line + 1 and first["line_text"] == first["b"]["line_text"]   # numbers shifted, text matched
    assert data["unmatched"]["a_only"] == []
    added = {n["module"].split(".")[2] for n in data["unmatched"]["b_only"]}
    assert added == {"2"} and len(data["unmatched"]["b_only"]) > 10     # the added layer, transformer.h.2.*
    assert data["aligned"]["exact"] > 40                                 # shifted lines still match exactly
    page = (recordings / "cmp.html").read_text()
    assert "transformer.h.1.mlp.act" in page and "Per-module curves" in page and "Only in B" in page


def test_the_same_script_in_another_process_does_not_differ(recordings):
    run = compare("a.dynstep", "again.dynstep", cwd=recordings)   # values in A, statistics only in the other
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no node differs" in run.stdout and "0 node(s) only in A, 0 only in B" in run.stdout


def test_one_run_step_against_its_next_step(recordings):
    run = compare("a.dynstep", "a.dynstep", "--steps", "0:1", "--json", cwd=recordings)
    assert run.returncode == 1
    first = json.loads(run.stdout)["first_divergence"]
    assert (first["a"]["step"], first["b"]["step"]) == (0, 1) and first["module"] == "transformer.wte"


@pytest.mark.skipif(not OTHER_TORCH_PYTHON, reason="DYNSTEP_OTHER_TORCH_PYTHON (a Python with another torch) is not set")
def test_the_same_script_under_another_torch_shows_no_false_divergence(run_a, tmp_path):
    versions = subprocess.run([OTHER_TORCH_PYTHON, "-c", "import dynstep.backends, torch; print(torch.__version__)"],
                              capture_output=True, text=True, timeout=120)
    assert versions.returncode == 0, (f"DYNSTEP_OTHER_TORCH_PYTHON={OTHER_TORCH_PYTHON} cannot import dynstep and torch "
                                      f"(install this checkout into it: pip install -e .): {versions.stderr[-800:]}")
    import torch

    assert versions.stdout.strip() != torch.__version__, "DYNSTEP_OTHER_TORCH_PYTHON runs this same torch"
    record(SCRIPT, tmp_path / "other.dynstep", tensors=True, python=OTHER_TORCH_PYTHON)
    run = compare(str(run_a / "a.dynstep"), str(tmp_path / "other.dynstep"), "--json", cwd=tmp_path)
    data = json.loads(run.stdout)
    assert run.returncode == 0 and data["first_divergence"] is None, run.stdout[-3000:]
    assert data["aligned"]["exact"] > 40 and data["compared"] > 100
