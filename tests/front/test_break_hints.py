"""Issue 30 item 5: Dynamo's hints, graph-break id and documentation page in `dynstep run`'s table,
`--explain` and the report; item 6: tables no longer fold words in half when stderr is not a
terminal (a CI log, a pipe). Everything through the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from dynstep.recording.trace_events import event_of
from dynstep._compat import TraceRecord

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import torch

    def scale_by_mean(x):
        m = x.mean().item()
        return x * m

    print(torch.compile(scale_by_mean, backend="eager")(torch.ones(3)).tolist())
""")
ITEM_LINE = 5
HINT = "Set `torch._dynamo.config.capture_scalar_outputs = True` or `export TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1` " \
       "to include these operations in the captured graph."


def dynstep(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "80",
               "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache"),
               **(env or {})}
    return subprocess.run([sys.executable, "-m", "dynstep", *args], cwd=ROOT, env=environ, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_the_break_table_gives_dynamos_hint_gb_id_and_page_unfolded_in_a_pipe(tmp_path):
    """Used to show the one-line reason only, folded at 120 columns (`capture_scalar_outp` / `uts`)."""
    (tmp_path / "prog.py").write_text(SCRIPT)
    run = dynstep("run", str(tmp_path / "prog.py"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[1.0, 1.0, 1.0]"
    lines = run.stderr.splitlines()
    head = lines.index("dynstep: 1 graph break(s), 0 recompile(s)")
    assert lines[head + 1] == (f"graph break at prog.py:{ITEM_LINE} in scale_by_mean: "
                               "Unsupported Tensor.item() call with capture_scalar_outputs=False")
    assert lines[head + 2:head + 5] == ["    m = x.mean().item()", f"    hint: {HINT}",
                                        "    GB0124: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html"]


def test_explain_shows_the_hint_as_it_happens(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT)
    run = dynstep("run", "--explain", str(tmp_path / "prog.py"))
    assert run.returncode == 0, run.stderr
    assert f"    hint: {HINT}" in run.stderr.splitlines()
    assert "Explanation: Dynamo does not support tracing `Tensor.item()`" in run.stderr
    assert "GB0124: https://" in run.stderr


def test_the_recording_and_report_keep_the_hints(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT)
    rec = tmp_path / "run.dynstep"
    assert dynstep("run", "--record", str(rec), str(tmp_path / "prog.py")).returncode == 0
    report = dynstep("report", str(rec), "--json", str(tmp_path / "r.json"))
    assert report.returncode == 0, report.stderr
    assert f"    hint: {HINT}" in report.stdout.splitlines()
    (event,) = [e for e in json.loads((tmp_path / "r.json").read_text())["events"] if e["kind"] == "graph_break"]
    assert event["gb_id"] == "GB0124" and event["hints"] == [HINT]
    page = (tmp_path / "run.report.html").read_text()
    assert "hint: Set `torch._dynamo.config.capture_scalar_outputs = True`" in page and "gb0124.html" in page


def test_a_message_without_hints_is_completed_from_dynamos_registry():
    """The message of a skipped frame or an older torch names only the type: the registry has the rest."""
    payload = ("Graph break in user code at /x/m.py:3\nGraph Break Reason: Encountered graph break\n\n"
               "Unsupported Tensor.item() call with capture_scalar_outputs=False\n\nUser code traceback:\n"
               '  File "/x/m.py", line 3, in f\n')
    event = event_of(TraceRecord("artifact", "0/0", "dynamo_graph_break_reason", payload))
    assert event.gb_id == "GB0124" and event.hints == (HINT.replace("= True` or", "= True` or"),)
    assert event.doc_url.endswith("/gb/gb0124.html")
