"""Sessions: scoping (nested, threads), rings, save/load, and a crash mid-run."""

import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import dynstep
from dynstep.core.errors import StorageError


@pytest.fixture
def probed():
    return torch.compile(lambda x: torch.tanh(x) * 2, backend="superstep",
                         options={"inner": "eager", "probe": ["op:tanh"], "actions": ["record"], "record": 3})


def test_nested_sessions_both_receive(probed):
    with dynstep.session() as outer:
        probed(torch.ones(2))
        with dynstep.session() as inner:
            probed(torch.ones(2))
        probed(torch.ones(2))
    assert len(outer.records()) == 3 and len(inner.records()) == 1


def test_concurrent_threads_get_their_own_hits(probed):
    probed(torch.ones(1))  # compile once, before the threads race
    results = {}
    barrier = threading.Barrier(2)

    def work(name, n):
        with dynstep.session() as s:
            barrier.wait()
            for _ in range(n):
                probed(torch.ones(1))
            barrier.wait()
        results[name] = len(s.records())

    threads = [threading.Thread(target=work, args=("a", 2)), threading.Thread(target=work, args=("b", 3))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert results == {"a": 2, "b": 3}


def test_hits_from_a_thread_without_session_go_to_the_latest_open_one(probed):
    with dynstep.session() as s:
        t = threading.Thread(target=lambda: probed(torch.ones(1)))
        t.start()
        t.join()
    assert len(s.records()) == 1


def test_ring_keeps_the_last_n_and_counts_drops(probed):
    with dynstep.session() as s:
        for i in range(5):
            probed(torch.full((2,), float(i)))
    snaps = s.records("op:tanh")
    assert [x.call for x in snaps][-3:] == [x.call for x in snaps] and len(snaps) == 3
    assert s.dropped["op:tanh"] == 2
    assert torch.allclose(snaps[-1].tensor, torch.tanh(torch.full((2,), 4.0)))


def test_save_and_load_roundtrip(tmp_path, probed):
    with dynstep.session() as s:
        probed(torch.randn(3))
        probed(torch.randn(2, 2))
    path = s.save(tmp_path / "run.dynstep")
    again = dynstep.load(path)
    assert len(again) == 2
    for a, b in zip(s.records(), again.records("op:tanh")):
        assert a.meta() == b.meta()
        assert torch.equal(a.tensor, b.tensor)
    assert not list(tmp_path.glob("**/*.pkl"))


def test_load_rejects_what_is_not_a_recording(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(StorageError, match="not a dynstep recording"):
        dynstep.load(tmp_path / "x")
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "important.txt").write_text("user data")
    with pytest.raises(StorageError, match="not empty"):
        dynstep.session(path=tmp_path / "y")
    assert (tmp_path / "y" / "important.txt").read_text() == "user data"


def test_a_crash_keeps_what_was_written(tmp_path):
    path = tmp_path / "crash.dynstep"
    script = textwrap.dedent(f"""
        import os, torch, dynstep
        f = torch.compile(lambda x: torch.tanh(x), backend="superstep",
                          options={{"inner": "eager", "probe": ["op:tanh"], "actions": ["record"]}})
        with dynstep.session(path={str(path)!r}):
            for i in range(10):
                f(torch.full((2,), float(i)))
            os._exit(3)   # dies without closing the session or running atexit
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 3, out.stderr
    rec = dynstep.load(path)
    assert len(rec) == 10  # every hit is written through before the probe returns
    assert torch.allclose(rec.records()[-1].tensor, torch.tanh(torch.full((2,), 9.0)))
    # a torn last line does not hide the rest
    with open(path / "records.jsonl", "a") as fh:
        fh.write('{"kind": "val')
    with pytest.warns(RuntimeWarning, match="trailing byte"):
        assert len(dynstep.load(path)) == 10


def test_streaming_session_file_loads_after_close(tmp_path, probed):
    with dynstep.session(path=tmp_path / "live.dynstep") as s:
        probed(torch.ones(2))
    assert len(dynstep.load(tmp_path / "live.dynstep")) == len(s.records()) == 1


def test_entering_a_session_twice_is_a_clear_error(probed):
    from dynstep.core.errors import SessionError

    s = dynstep.session()
    with s:
        with pytest.raises(SessionError, match="already open"):
            with s:
                pass
        probed(torch.ones(2))
    assert len(s.records()) == 1          # counted once
    with s:                               # closed again: it may be reopened
        probed(torch.ones(2))
    assert len(s.records()) == 2


def test_exiting_a_session_in_another_thread_is_a_clear_error():
    from dynstep.core.errors import SessionError

    s = dynstep.session()
    s.__enter__()
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(SessionError, s.__exit__, None, None, None)))
    t.start()
    t.join()
    assert "must be exited there" in str(errors[0].value)
    s.__exit__(None, None, None)


@pytest.mark.parametrize("bad", [-1, 0, "x", 2.5, True])
def test_session_arguments_are_checked_when_the_session_is_made(bad):
    from dynstep.core.errors import OptionsError

    with pytest.raises(OptionsError, match=r"summaries=.*expected a positive integer"):
        dynstep.session(summaries=bad)
