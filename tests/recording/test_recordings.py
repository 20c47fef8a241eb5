"""Recordings under hostile input: nothing lost, nothing deleted, nothing read from outside (issue 14, items 1-4)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import dynstep
from dynstep.core.errors import StorageError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def probed():
    return torch.compile(lambda x: torch.tanh(x) * 2, backend="superstep",
                         options={"inner": "eager", "probe": ["op:tanh"], "actions": ["record"], "record": 64})


def _recording(path, probed, n=3):
    with dynstep.session(path=path):
        for i in range(n):
            probed(torch.full((2,), float(i)))
    return path


# -- 1. saving never deletes the user's files ----------------------------------------------------

def test_saving_into_a_folder_with_a_foreign_manifest_refuses_and_keeps_it(tmp_path, probed):
    app = tmp_path / "webapp"
    app.mkdir()
    (app / "manifest.json").write_text('{"name": "my web app", "start_url": "/"}')
    (app / "index.html").write_text("<html>")
    with dynstep.session() as s:
        probed(torch.ones(2))
    for attempt in (lambda: s.save(app), lambda: dynstep.session(path=app)):
        with pytest.raises(StorageError, match="not a dynstep recording"):
            attempt()
    assert sorted(p.name for p in app.iterdir()) == ["index.html", "manifest.json"]
    assert (app / "manifest.json").read_text().startswith('{"name": "my web app"')


def test_saving_over_a_recording_replaces_it_by_renaming(tmp_path, probed):
    path = _recording(tmp_path / "run.dynstep", probed, n=3)
    with dynstep.session() as s:
        probed(torch.ones(2))
    s.save(path)
    assert len(dynstep.load(path)) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["run.dynstep"]   # no .old/.new left beside it


def test_a_recording_holding_a_foreign_file_is_not_replaced(tmp_path, probed):
    path = _recording(tmp_path / "run.dynstep", probed, n=2)
    (path / "notes.txt").write_text("mine")
    with pytest.raises(StorageError, match="files dynstep did not write.*notes.txt"):
        dynstep.session(path=path)
    assert (path / "notes.txt").read_text() == "mine" and len(dynstep.load(path)) == 2


def test_a_second_writer_gets_an_error_naming_the_path_and_the_holder(tmp_path, probed):
    path = tmp_path / "live.dynstep"
    script = textwrap.dedent(f"""
        import sys, dynstep
        with dynstep.session(path={str(path)!r}):
            print("ready", flush=True)
            sys.stdin.readline()
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StorageError, match=rf"{path.name}.*process {holder.pid} is recording into it"):
            dynstep.session(path=path)
        with dynstep.session() as s:
            probed(torch.ones(2))
        with pytest.raises(StorageError, match=f"process {holder.pid}"):
            s.save(path)
    finally:
        holder.communicate("\n", timeout=120)
    assert holder.returncode == 0
    dynstep.session(path=path).__exit__()   # the lock died with its holder: a new writer may take over


def test_two_sessions_in_one_process_cannot_stream_to_the_same_path(tmp_path):
    first = dynstep.session(path=tmp_path / "one.dynstep")
    with pytest.raises(StorageError, match=f"process {os.getpid()}"):
        dynstep.session(path=tmp_path / "one.dynstep")
    first.__exit__()


# -- 2. a killed run loses no hit that returned ----------------------------------------------------

KILL_SCRIPT = textwrap.dedent("""
    import sys, torch, dynstep
    f = torch.compile(lambda x: torch.tanh(x), backend="superstep",
                      options={"inner": "eager", "probe": ["op:tanh"], "actions": %s})
    with dynstep.session(path=sys.argv[1]):
        f(torch.zeros(2))
        print("compiled", flush=True)
        for i in range(1, 1_000_000):
            f(torch.full((2,), float(i)))
            print(i, flush=True)          # this hit returned to the model
""")


@pytest.mark.parametrize("sig,after,actions", [(signal.SIGKILL, 10, ["record"]), (signal.SIGTERM, 40, ["record"]),
                                               (signal.SIGKILL, 25, ["summary"])])
def test_every_hit_that_returned_before_a_kill_loads(tmp_path, sig, after, actions):
    path = tmp_path / "killed.dynstep"
    child = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT % json.dumps(actions), str(path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "compiled", child.stderr.read()
        returned = 0
        while returned < after:
            returned = int(child.stdout.readline())
        child.send_signal(sig)
        child.wait(timeout=60)
    finally:
        child.kill()
    rec = dynstep.load(path)
    values = [r.call for r in rec.records("op:tanh")]
    assert len(values) >= returned + 1 and values == list(range(len(values)))
    if "record" in actions:
        assert torch.equal(rec.records()[returned].tensor, torch.tanh(torch.full((2,), float(returned))))


def test_a_recording_cut_mid_write_loads_every_complete_hit_and_says_what_it_ignored(tmp_path, probed):
    path = _recording(tmp_path / "cut.dynstep", probed, n=4)
    with open(path / "records.jsonl", "ab") as fh:
        fh.write(b'{"kind": "value", "probe": "op:ta')
    with pytest.warns(RuntimeWarning, match="ignored 33 trailing byte"):
        rec = dynstep.load(path)
    assert len(rec) == 4 and rec.problems == ("ignored 33 trailing byte(s) of an incomplete last line "
                                               "(a run cut mid-write)",)


# -- 3. nothing read from outside, no hang -------------------------------------------------------

def _rewrite(path, fn):
    lines = [json.loads(line) for line in (path / "records.jsonl").read_text().splitlines()]
    (path / "records.jsonl").write_text("".join(json.dumps(fn(i, m)) + "\n" for i, m in enumerate(lines)))


@pytest.mark.parametrize("name", ["../outside.safetensors", "/tmp/outside.safetensors", "sub/x.safetensors",
                                  "..", "chunk.bin", ".hidden.safetensors"])
def test_a_chunk_name_outside_the_recording_is_refused(tmp_path, probed, name):
    from safetensors.torch import save_file

    save_file({"t0": torch.full((2,), 666.0)}, str(tmp_path / "outside.safetensors"))
    path = _recording(tmp_path / "run.dynstep", probed, n=2)
    _rewrite(path, lambda i, m: {**m, "tensor": {"chunk": name, "key": "t0"}} if i == 1 else m)
    with pytest.raises(StorageError, match="not a plain .*refusing to read outside"):
        dynstep.load(path)


def test_a_chunk_that_is_a_fifo_does_not_hang_the_load(tmp_path, probed):
    path = _recording(tmp_path / "run.dynstep", probed, n=2)
    os.mkfifo(path / "chunk-1-000009.safetensors")
    _rewrite(path, lambda i, m: {**m, "tensor": {"chunk": "chunk-1-000009.safetensors", "key": "t0"}} if i == 0 else m)
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match="not a regular file"):
        rec = dynstep.load(path)
    assert time.monotonic() - start < 10
    assert rec.records()[0].tensor is None and rec.records()[1].tensor is not None


def test_a_symlinked_chunk_is_not_followed(tmp_path, probed):
    from safetensors.torch import save_file

    path = _recording(tmp_path / "run.dynstep", probed, n=1)
    save_file({"t0": torch.full((2,), 666.0)}, str(tmp_path / "outside.safetensors"))
    chunk = json.loads((path / "records.jsonl").read_text())["tensor"]["chunk"]
    (path / chunk).unlink()
    (path / chunk).symlink_to(tmp_path / "outside.safetensors")
    with pytest.warns(RuntimeWarning, match="cannot be read"):
        assert dynstep.load(path).records()[0].tensor is None


# -- 4. corrupt recordings: load what is valid, say what was skipped -------------------------------

@pytest.mark.parametrize("field,value,message", [
    ("shape", "abc", "field 'shape' must be a list of non-negative integers"),
    ("shape", [-1], "field 'shape' must be a list of non-negative integers"),
    ("kind", "banana", "field 'kind' must be one of"),
    ("call", "3", "field 'call' must be int"),
    ("stats", None, "field 'stats' must be an object"),
    ("stats", {"min": "low"}, "a stats value must be a number"),
    ("node", 7, "field 'node' must be str"),
    ("tensor", "chunk-1.safetensors", "field 'tensor' must be null or"),
])
def test_a_corrupt_line_is_skipped_and_named(tmp_path, probed, field, value, message):
    path = _recording(tmp_path / "run.dynstep", probed, n=3)
    _rewrite(path, lambda i, m: {**m, field: value} if i == 1 else m)
    with pytest.warns(RuntimeWarning, match="2 snapshot.s. loaded, 1 problem"):
        rec = dynstep.load(path)
    assert [r.call for r in rec.records()] == [0, 2]
    assert len(rec.problems) == 1 and rec.problems[0].startswith("records.jsonl line 2: " + message)


def test_lines_that_are_not_json_objects(tmp_path, probed):
    path = _recording(tmp_path / "run.dynstep", probed, n=2)
    with open(path / "records.jsonl", "a") as fh:
        fh.write("not json\n[1, 2]\n\n")
    with pytest.warns(RuntimeWarning):
        rec = dynstep.load(path)
    assert len(rec) == 2 and len(rec.problems) == 2
    assert "line 3 is not JSON" in rec.problems[0] and "line 4: expected a JSON object" in rec.problems[1]


def test_a_truncated_or_deleted_chunk_loses_only_its_tensors(tmp_path, probed):
    path = _recording(tmp_path / "run.dynstep", probed, n=3)
    chunks = [json.loads(line)["tensor"]["chunk"] for line in (path / "records.jsonl").read_text().splitlines()]
    (path / chunks[0]).write_bytes((path / chunks[0]).read_bytes()[:20])   # truncated
    (path / chunks[1]).unlink()                                            # deleted
    with pytest.warns(RuntimeWarning):
        rec = dynstep.load(path)
    tensors = [r.tensor for r in rec.records()]
    assert tensors[0] is None and tensors[1] is None and torch.equal(tensors[2], torch.tanh(torch.full((2,), 2.0)))
    assert sum("cannot be read" in p for p in rec.problems) == 2
    assert sum("load without their tensor" in p for p in rec.problems) == 2


def test_non_finite_stats_are_valid_json_and_load_back(tmp_path):
    f = torch.compile(lambda x: torch.log(x), backend="superstep",
                      options={"inner": "eager", "probe": ["op:log"]})
    with dynstep.session(path=tmp_path / "nan.dynstep"):
        f(torch.tensor([-1.0, 0.0, 1.0]))
    text = (tmp_path / "nan.dynstep" / "records.jsonl").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in records.jsonl"))
    stats = dynstep.load(tmp_path / "nan.dynstep").records()[0].stats
    assert stats.nan == 1 and stats.inf == 1 and stats.min == 0.0


def test_saving_snapshots_that_share_a_tensor_or_its_storage(tmp_path):
    """One tensor held by two snapshots (user-built ones) is written once; a view of it is copied
    (safetensors refuses tensors that share memory)."""
    from dynstep.core.records import Snapshot, Stats
    from dynstep.recording.storage import save

    def snap(t, i):
        return Snapshot(kind="value", probe="p", node="n", target="t", module="m", source="s.py:1", graph="g",
                        call=i, shape=tuple(t.shape), dtype="float32", device="cpu", stats=Stats(), seq=i, tensor=t)

    a = torch.arange(6.0)
    rec = dynstep.load(save([snap(a, 0), snap(a, 1), snap(a[2:], 2), snap(torch.empty(0), 3), snap(torch.empty(0), 4)],
                            tmp_path / "r.dynstep"))
    assert [s.tensor.tolist() for s in rec.all()] == [a.tolist(), a.tolist(), a[2:].tolist(), [], []]
    assert not rec.problems


def test_unreadable_manifests_and_other_formats(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    with pytest.raises(StorageError, match="not a readable dynstep manifest"):
        dynstep.load(bad)
    (bad / "manifest.json").write_text(json.dumps({"format": "dynstep-recording", "version": 99}))
    with pytest.raises(StorageError, match="written by a newer dynstep"):
        dynstep.load(bad)
    (bad / "manifest.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    with pytest.raises(StorageError, match="not a dynstep recording"):
        dynstep.load(bad)
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError, match="no manifest.json"):
        dynstep.load(tmp_path / "file")


def test_a_version_1_recording_still_loads(tmp_path):
    """Recordings written before this change: bare NaN in JSON, chunk-<pid>-<n> names, version 1."""
    from safetensors.torch import save_file

    path = tmp_path / "v1.dynstep"
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps({"format": "dynstep-recording", "version": 1}))
    save_file({"t0": torch.ones(2)}, str(path / "chunk-12-000001.safetensors"))
    line = {"kind": "value", "probe": "op:x", "node": "n", "target": "t", "module": "", "source": "a.py:1",
            "graph": "g", "call": 0, "shape": [2], "dtype": "float32", "device": "cpu", "site": 1, "seq": 1,
            "source_text": "", "stats": {"min": float("nan"), "max": 1.0, "mean": 1.0, "std": 0.0,
                                         "absmax": 1.0, "nan": 0, "inf": 0, "count": 2},
            "tensor": {"chunk": "chunk-12-000001.safetensors", "key": "t0"}}
    (path / "records.jsonl").write_text(json.dumps(line) + "\n")
    rec = dynstep.load(path)
    assert rec.problems == () and torch.equal(rec.records()[0].tensor, torch.ones(2))
