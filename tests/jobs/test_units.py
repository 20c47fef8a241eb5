"""The distributed room's parts that need no second process: ranks, identity, per-rank recordings,
forwarded commands, rank comparison, the nan message."""

from __future__ import annotations

import json
import re

import pytest
import torch

import dynstep
from dynstep.core.errors import NonFiniteError, OptionsError, StorageError
from dynstep.core.events import Evaluated, Info, TensorView
from dynstep.core.options import Options
from dynstep.core.records import Snapshot, Stats
from dynstep.jobs import forward, identity
from dynstep.jobs.identity import Identity
from dynstep.jobs.ranks import check_job, chosen
from dynstep.recording import paths
from dynstep.recording.storage import Writer, save


@pytest.fixture
def as_rank(monkeypatch):
    """This process plays rank N of a job of W (torchrun's environment, no process group)."""
    def play(rank: int, world: int = 2) -> None:
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world))
        identity.reset()

    yield play
    identity.reset()


def test_ranks_option_syntax():
    assert Options.from_mapping({"ranks": "1,3"}).ranks == (1, 3)
    assert Options.from_mapping({"ranks": "all"}).ranks == "all"
    assert Options.from_mapping({"ranks": 0}).ranks == (0,)
    assert Options.from_mapping({}, environ={"DYNSTEP_RANKS": "ALL"}).ranks == "all"
    assert Options.from_mapping({}).ranks is None
    for bad in ("one", "1,x", -1, [True], ""):
        if bad == "":
            continue
        with pytest.raises(OptionsError, match="must be 'all' or rank numbers"):
            Options.from_mapping({"ranks": bad})


def test_ranks_checked_against_the_job():
    assert chosen("all", 3) == {0, 1, 2}
    assert chosen(None, 2) == {0}
    with pytest.raises(OptionsError, match=r"rank 3 does not exist in this job of 2 rank\(s\) \(0-1\)"):
        chosen((1, 3), 2)
    with pytest.raises(OptionsError, match="not part of a distributed job"):
        check_job((1,), Identity())
    with pytest.raises(OptionsError, match="no process group is initialized"):
        check_job((0,), Identity(rank=1, world=2, launcher="environment"))
    assert check_job((1,), Identity(rank=1, world=2, launcher="torchrun")) == {1}


def test_identity_from_the_launcher_environment(as_rank):
    assert identity.current() == Identity()
    as_rank(1, 4)
    ident = identity.current()
    assert (ident.rank, ident.world, ident.multi, ident.has_group) == (1, 4, True, False)


def _snap(rank: int, value: float, node: str = "x_3") -> Snapshot:
    t = torch.full((2,), value)
    return Snapshot(kind="value", probe="module:layers.1", node=node, target="add", module="layers.1",
                    source="job.py:36", graph="forward[4/0]", call=0, shape=(2,), dtype="float32", device="cpu",
                    stats=Stats(min=value, max=value, mean=value, count=2), tensor=t, rank=rank, world_size=2)


def test_per_rank_recordings_load_merged_with_a_rank_filter(tmp_path, as_rank):
    run = tmp_path / "run.dynstep"
    for rank, value in ((0, 1.0), (1, 1.5)):
        as_rank(rank)
        with dynstep.session(path=run) as s:
            s.add(_snap(rank, value))
            s.add(_snap(rank, 2.0, node="head"))
    assert sorted(p.name for p in run.iterdir()) == ["rank0", "rank1"]
    rec = dynstep.load(run)
    assert rec.ranks == [0, 1] and len(rec) == 4
    assert [s.stats.mean for s in rec.records("module:layers.1", rank=1)] == [1.5, 2.0]
    assert all(s.world_size == 2 for s in rec.all())
    diffs = rec.compare_ranks()
    assert [(d.node, d.rank, d.max_abs) for d in diffs] == [("x_3", 1, 0.5)]


def test_old_recordings_load_as_rank_0(tmp_path):
    save([_snap(0, 1.0)], tmp_path / "one")
    lines = (tmp_path / "one" / "records.jsonl").read_text().splitlines()
    meta = json.loads(lines[0])
    del meta["rank"], meta["world_size"]
    (tmp_path / "one" / "records.jsonl").write_text(json.dumps(meta) + "\n")
    snap = dynstep.load(tmp_path / "one").all()[0]
    assert (snap.rank, snap.world_size) == (0, 1)


def test_a_recording_directory_shared_by_two_jobs_is_refused(tmp_path, as_rank):
    run = tmp_path / "run.dynstep"
    as_rank(0)
    first = Writer(paths.rank_path(run))          # job A's rank 0, still recording
    first.append(_snap(0, 1.0))
    with pytest.raises(StorageError, match=r"process \d+ (is recording into it|holds its lock)"):
        dynstep.session(path=run)                  # job B's rank 0
    first.close()
    assert len(dynstep.load(run).all()) == 1       # nothing lost
    identity.reset()
    save([_snap(0, 1.0)], tmp_path / "single")
    as_rank(1)
    with pytest.raises(StorageError, match="recording of a single process"):
        dynstep.session(path=tmp_path / "single")


def test_forwarded_events_round_trip():
    view = TensorView(shape=(2,), dtype="float32", device="cpu", stats=Stats(0.0, 1.0, 0.5, 0.5, 1.0, 0, 0, 2), sample=(0.0, 1.0))
    events = [Evaluated("value.mean()", "tensor(0.5)", view), Info("x_3 replaced")]
    assert forward.decode(forward.encode(events)) == events


def test_nan_raise_names_the_rank(as_rank, monkeypatch):
    monkeypatch.setenv("DYNSTEP_NATIVE", "0")   # the Python kernel words it the same; no build here
    as_rank(1)
    cm = torch.compile(lambda x: torch.log(x) * 2, backend=dynstep.superstep(inner="eager", nan="raise"))
    with pytest.raises(NonFiniteError, match=r"^rank 1 of 2: 1 NaN in the output of torch.log") as info:
        cm(torch.tensor([-1.0, 1.0]))
    assert info.value.rank == 1


def test_the_report_draws_one_rank_and_names_the_first_rank_that_differs(tmp_path, as_rank):
    from dynstep.report.text import ranks_line
    from dynstep.report.export import to_dict
    from dynstep.report.model import build

    run = tmp_path / "run.dynstep"
    for rank, value in ((0, 1.0), (1, 1.5)):
        as_rank(rank)
        with dynstep.session(path=run) as s:
            s.add(_snap(rank, value))
            s.add(_snap(rank, 2.0, node="head"))
    rec = dynstep.load(run, tensors=False)
    report = build(rec, rank=1)
    assert report.rank == 1 and report.ranks == (0, 1) and {h.rank for h in report.hits} == {1}
    assert [(d.node, d.rank) for d in report.rank_differences] == [("x_3", 1)]
    assert "first value that differs from rank 0: x_3 (layers.1, job.py:36) call 0 on rank 1" in ranks_line(report)
    assert to_dict(report)["ranks"]["differences"][0]["node"] == "x_3"
    assert build(rec, select=["node:head"]).rank_differences == ()


def test_dynstep_run_refuses_ranks_a_torchrun_job_does_not_have():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "dynstep", "run", "--ranks", "3", "--pause", "module:layers.1",
                           "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", "job.py"],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--ranks: ranks=3: rank 3 does not exist in this job of 2 rank(s) (0-1)" in done.stderr


def test_the_launchers_own_options_are_left_to_it():
    from dynstep.front.jobs_cli import environment, split_launcher

    argv = ["run", "--pause", "module:layers.1", "--ranks", "1", "-m", "torch.distributed.run", "--nproc-per-node",
            "2", "train.py", "--lr", "3"]
    assert split_launcher(argv) == (argv[:7], ["--nproc-per-node", "2", "train.py", "--lr", "3"])
    assert split_launcher(["run", "torchrun", "--standalone", "t.py"]) == (["run", "torchrun"], ["--standalone", "t.py"])
    assert split_launcher(["run", "train.py", "--x"]) == (["run", "train.py", "--x"], None)
    assert environment({"pause": ["module:a"], "ranks": "all", "grads": True}, {"DYNSTEP_PAUSE": "op:mm"}) == {
        "DYNSTEP_PAUSE": "op:mm,module:a", "DYNSTEP_RANKS": "all", "DYNSTEP_GRADS": "1"}


def test_the_collective_timeout_is_raised_and_restored_through_compat():
    import socket
    from datetime import timedelta

    import torch.distributed as dist

    from dynstep import _compat

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            timeout=timedelta(seconds=42))
    try:
        assert _compat.pg_timeout() == timedelta(seconds=42)
        assert _compat.set_pg_timeout(timedelta(days=1)) and _compat.pg_timeout() == timedelta(days=1)
        _compat.set_pg_timeout(timedelta(seconds=42))
        assert _compat.pg_timeout() == timedelta(seconds=42)
        _compat.default_store().set("k", "v")
        assert _compat.default_store().get("k") == b"v"
    finally:
        dist.destroy_process_group()
        identity.reset()


# -- no wait without a bound: the lockstep's waits against an in-process store ----------------------------------

def _coordinator(store, rank: int):
    from dynstep.jobs.coordinator import Coordinator

    coord = Coordinator(ranks="all")
    coord.ident, coord.store, coord.pausers = Identity(rank=rank, world=2, launcher="torchrun"), store, frozenset()
    return coord


def _beating(store, rank: int):
    """rank's heartbeat, alive, from a thread (stop it with the returned event)."""
    import threading

    stop = threading.Event()

    def beat():
        while not stop.wait(0.2):
            store.add(f"hb/{rank}", 1)

    threading.Thread(target=beat, daemon=True).start()
    return stop


def test_a_live_rank_that_never_comes_to_the_stop_point_is_waited_for_a_bounded_time(monkeypatch, events):
    """Rank 1 is alive (heartbeats) and not paused, but never reaches stop #0 (its stop points no longer line
    up): rank 0 waits DYNSTEP_LOCKSTEP_WAIT while nobody moves, says so, and goes on without the lockstep;
    rank 1, at its next stop point, goes on without it too, told why."""
    import time

    from torch.distributed import HashStore

    from dynstep.core.events import Warning_

    monkeypatch.setenv("DYNSTEP_LOCKSTEP_WAIT", "2")
    store = HashStore()
    store.set("at/1", json.dumps({"k": -1}))
    stop = _beating(store, 1)
    try:
        zero = _coordinator(store, 0)
        start = time.monotonic()
        assert zero.agree(True) is True                      # its own answer: no barrier any more
        assert 2 <= time.monotonic() - start < 30 and zero.detached
        assert zero.agree(False) is False and zero.k == 1    # no more barriers (k stays)
        one = _coordinator(store, 1)
        assert one.agree(False) is False and one.detached
    finally:
        stop.set()
    warnings = [e.message for e in events if isinstance(e, Warning_)]
    assert len(warnings) == 2, warnings
    assert "rank 0 stops waiting for the other ranks at stop points: rank 0 waited at stop #0 for rank 1 (last seen " \
           "at stop #-1" in warnings[0] and "DYNSTEP_LOCKSTEP_WAIT" in warnings[0]
    assert warnings[1].startswith("dynstep: rank 1 stops waiting for the other ranks at stop points: rank 0 gave up "
                                  "the lockstep first: rank 0 waited at stop #0")


def test_a_paused_rank_holds_the_others_as_long_as_it_likes(monkeypatch):
    """While a rank is paused (the user looks), the lockstep's bound does not run out."""
    import threading
    import time

    from torch.distributed import HashStore

    monkeypatch.setenv("DYNSTEP_LOCKSTEP_WAIT", "2")
    store = HashStore()
    store.set("at/1", json.dumps({"k": 0}))
    store.set("paused/1", json.dumps({"k": 0, "pause": 1, "node": "x_3"}))
    stop = _beating(store, 1)

    def come_later():    # rank 1 goes on after 4 s paused: it arrives, releasing rank 0
        time.sleep(4)
        store.delete_key("paused/1")
        if store.add("arr/0", 1) == 2:
            store.set("go/0", "go:0:0")

    threading.Thread(target=come_later, daemon=True).start()
    try:
        zero = _coordinator(store, 0)
        assert zero.agree(False) is False and not zero.detached
    finally:
        stop.set()


def test_a_terminal_turn_held_by_a_rank_no_longer_paused_is_taken_over(events):
    """The turn is given back after the pause ends; a turn left behind (rank 1 is not paused) is not waited on
    for ever: rank 0 takes it after a short grace, and says so."""
    from torch.distributed import HashStore

    from dynstep.core.events import Warning_

    store = HashStore()
    store.set("turn", "1")
    stop = _beating(store, 1)
    try:
        zero = _coordinator(store, 0)
        assert zero._take_turn(None, follow=False) is None
    finally:
        stop.set()
    assert store.get("turn") == b"0"
    (warning,) = [e.message for e in events if isinstance(e, Warning_)]
    assert re.fullmatch(r"dynstep: rank 1 held the terminal turn without being paused for \d+ s; rank 0 takes it",
                        warning), warning


def test_reading_a_key_another_rank_deletes_at_that_moment_never_blocks():
    """`paused/<rank>` is deleted as that rank leaves its pause. A read that first checked the key and then
    got it waited, when the delete fell between the two, until the key came back or the store timed out,
    while the rank that deleted it waited at the next barrier for this one: a `step --all` job hung so on
    a loaded machine (2026-11-26). The read is one request: the value, or None."""
    from datetime import timedelta

    from torch.distributed import HashStore

    from dynstep.jobs.store import read

    class DeletedRightAfterCheck:    # the other rank's delete lands just after this rank's check
        def __init__(self, base):
            self.base = base

        def check(self, keys):
            seen = self.base.check(keys)
            for key in keys:
                self.base.delete_key(key)
            return seen

        def __getattr__(self, name):
            return getattr(self.base, name)

    base = HashStore()
    base.set_timeout(timedelta(seconds=2))
    base.set("paused/1", json.dumps({"k": 2, "pause": 2, "node": "linear_8"}))
    store = DeletedRightAfterCheck(base)
    assert json.loads(read(store, "paused/1"))["node"] == "linear_8"
    base.delete_key("paused/1")
    assert read(store, "paused/1") is None
    assert not base.check(["paused/1"])       # reading wrote nothing
    base.set("empty", "")
    assert read(store, "empty") == ""
