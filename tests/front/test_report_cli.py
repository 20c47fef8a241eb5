"""`dynstep report`: what it writes, what it says about bad recordings, and escaping of user strings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from dynstep.core.records import Snapshot, Stats
from dynstep.front.cli import main
from dynstep.recording.storage import save
from dynstep.recording.facts import CompileEvent, GraphPlan, PlanRow, PlanSite, RunInfo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVIL_MODULE = "<script>window.__pwned=1</script>"
EVIL_LINE = "y = '<script>window.__pwned=2</script>' # [bold red]not markup[/]"
EVIL_PROBE = 'module:<img src=x onerror="window.__pwned=3">'


def evil_recording(path, n=3, nan_at=1):
    snaps = [Snapshot(kind="value", probe=EVIL_PROBE, node="lin</script>", target="torch.relu", module=EVIL_MODULE,
                      source="m<b>.py:3", graph="f[0/0]", call=i, shape=(2,), dtype="float32", device="cpu",
                      stats=Stats(nan=2) if i >= nan_at else Stats(0.0, 1.0, 0.5, 0.1, 1.0, count=2), site=1, seq=i + 1,
                      source_text=EVIL_LINE) for i in range(n)]
    plan = GraphPlan("f[0/0]", "0/0", "eager", (("probe", EVIL_PROBE),),
                     (PlanRow("lin</script>", "torch.relu", EVIL_MODULE, "m<b>.py:3", "/x/m<b>.py", EVIL_LINE,
                              (PlanSite(1, "value", EVIL_PROBE, ("summary",)),)),))
    event = CompileEvent("graph_break", "0/0", "/x/m<b>.py", 3, "f<script>", "</script><script>window.__pwned=4</script>",
                         detail="<iframe src=//x.invalid>", source_text=EVIL_LINE)
    return save(snaps, path, run=RunInfo.now(), compile=[plan, event])


def report(*args, capsys=None):
    code = main(["report", *map(str, args)])
    out = capsys.readouterr() if capsys is not None else None
    return code, out


def test_every_string_from_user_code_is_escaped(tmp_path, capsys):
    rec = evil_recording(tmp_path / "evil.dynstep")
    code, out = report(rec, "-o", tmp_path / "evil.html", capsys=capsys)
    assert code == 0, out.err
    page = (tmp_path / "evil.html").read_text()
    for raw in (EVIL_MODULE, "<img src=x", "</script><script>", "<iframe", "lin</script>", "m<b>.py"):
        assert raw not in page
    assert page.count("<script") == 3                        # the two JSON blocks and the page's own script
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page and "\\u003cscript\\u003ewindow.__pwned=1" in page
    assert "onerror" not in page.replace("onerror=&quot;", "")    # only inside an escaped attribute value
    csp = re.search(r'Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp and "unsafe-inline" not in csp.split(";")[1]
    assert "[bold red]not markup[/]" in out.out                 # the terminal summary prints it, not as rich markup


def test_outputs_html_json_and_tensorboard(tmp_path, capsys):
    rec = evil_recording(tmp_path / "r.dynstep")
    code, out = report(rec, "--json", tmp_path / "r.json", "--tensorboard", tmp_path / "tb", capsys=capsys)
    assert code == 0, out.err
    assert (tmp_path / "r.report.html").is_file()                 # default: beside the recording
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["first_nonfinite"]["call"] == 1 and data["events"][0]["kind"] == "graph_break"
    assert any(n.startswith("events.out.tfevents.") for n in os.listdir(tmp_path / "tb"))
    assert "first NaN/Inf:" in out.out and "r.report.html" in out.out


def _manifest(path, text):
    path.mkdir()
    (path / "manifest.json").write_text(text)
    return path


def _index(path, text=""):
    (path / "records.jsonl").write_text(text)
    return path


@pytest.mark.parametrize("make,expected", [
    (lambda p: p / "absent.dynstep", r"no recording at .*absent\.dynstep"),
    (lambda p: (p / "empty").mkdir() or p / "empty", r"empty is not a dynstep recording \(no manifest\.json\)"),
    (lambda p: (p / "notes.txt").write_text("hi") and p / "notes.txt", r"notes\.txt is not a dynstep recording"),
    (lambda p: _manifest(p / "app", '{"name": "my web app"}'), r"app: not a dynstep recording \(manifest"),
    (lambda p: _manifest(p / "cut", '{"format": "dynstep-rec'), r"cut/manifest\.json: not a readable dynstep manifest"),
    (lambda p: _manifest(p / "new", '{"format": "dynstep-recording", "version": 9}'),
     r"new: recording format version 9 was written by a newer dynstep; upgrade dynstep"),
    (lambda p: _manifest(p / "noindex", '{"format": "dynstep-recording", "version": 2}'),
     r"noindex: its index records\.jsonl is missing"),
    (lambda p: _index(_manifest(p / "none", '{"format": "dynstep-recording", "version": 2}')),
     r"none: the recording holds no probe hit and no compile event"),
])
def test_a_bad_recording_is_a_clear_error_naming_the_file(tmp_path, capsys, make, expected):
    code, out = report(make(tmp_path), capsys=capsys)
    assert code == 1 and out.out == ""
    assert re.search(r"^dynstep report: .*" + expected, out.err), out.err


def test_a_truncated_recording_reports_what_it_holds_and_says_what_is_missing(tmp_path, capsys):
    rec = evil_recording(tmp_path / "t.dynstep")
    with open(rec / "records.jsonl", "ab") as fh:
        fh.write(b'{"kind": "value", "pro')
    code, out = report(rec, capsys=capsys)
    assert code == 0 and "problem:" in out.out and "trailing byte" in out.out
    assert "The recording has 1 problem(s)" in (tmp_path / "t.report.html").read_text()


def test_a_bad_selector_is_a_usage_error(tmp_path, capsys):
    code, out = report(evil_recording(tmp_path / "r.dynstep"), "--select", "modul:x", capsys=capsys)
    assert code == 2 and "--select" in out.err


def test_the_cli_runs_as_a_subprocess(tmp_path):
    rec = evil_recording(tmp_path / "r.dynstep")
    done = subprocess.run([sys.executable, "-m", "dynstep", "report", str(rec), "-o", str(tmp_path / "p.html")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "dynstep report" in done.stdout and (tmp_path / "p.html").stat().st_size > 1000
