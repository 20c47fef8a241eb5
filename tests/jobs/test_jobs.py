"""Distributed jobs for real: two CPU processes, gloo, DDP training of a small transformer
(tests/jobs/job.py) under torchrun, through `dynstep run`, and under a launcher of our own.

Each test compares with `job.simulate()`, the same training in eager in this process.
"""

from __future__ import annotations

import json
import re
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import dynstep

from .. import reaper
from . import job

ROOT = Path(__file__).resolve().parents[2]
JOB = str(Path(__file__).with_name("job.py"))
pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built")


def env(**dynstep_vars: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DYNSTEP_")}
    return {**base, "PYTHONPATH": str(ROOT), "DYNSTEP_NATIVE": "0", "OMP_NUM_THREADS": "1", "NO_COLOR": "1",
            "COLUMNS": "200", "TORCH_CPP_LOG_LEVEL": "ERROR", "PYTHONWARNINGS": "ignore",
            **{f"DYNSTEP_{k.upper()}": v for k, v in dynstep_vars.items()}}


def run(argv: list[str], environ: dict[str, str], timeout: int = 150) -> subprocess.CompletedProcess:
    """The command, bounded: past `timeout` the launcher and every worker of its job are killed (torchrun's
    workers run in sessions of their own: killing the launcher alone would leave them running)."""
    try:
        return subprocess.run([sys.executable, *argv], env=environ, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        killed = end_job()
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise AssertionError(f"{' '.join(argv[:4])} ... did not end within {timeout} s; killed {killed}\n"
                             f"{(out + err)[-3000:]}") from None


def end_job(*procs: subprocess.Popen) -> list[str]:
    """Kill these processes and every process this test started that still runs (tests/reaper.py)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    return reaper.reap(os.environ.get(reaper.VAR, ""))


def torchrun(*args: str, environ: dict[str, str]) -> subprocess.CompletedProcess:
    return run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", JOB, *args], environ)


def results(out: Path) -> dict[int, dict]:
    return {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(2)}


def assert_trained_like(got: dict[int, dict], expected: dict[int, dict]) -> None:
    for rank in range(2):
        assert got[rank]["losses"] == pytest.approx(expected[rank]["losses"], rel=1e-5, abs=1e-6), rank
        assert got[rank]["params"] == pytest.approx(expected[rank]["params"], rel=1e-5, abs=1e-5), rank


def test_per_rank_recordings_of_a_ddp_step_equal_each_ranks_eager_values(tmp_path):
    record = tmp_path / "run.dynstep"
    done = torchrun("--out", str(tmp_path), "--record", str(record),
                    environ=env(probe="module:layers.*", actions="record"))
    assert done.returncode == 0, done.stderr[-3000:]
    expected = job.simulate(steps=2)
    assert_trained_like(results(tmp_path), expected)
    assert sorted(p.name for p in record.iterdir()) == ["rank0", "rank1"]
    rec = dynstep.load(record)
    assert rec.ranks == [0, 1] and not rec.problems
    for rank in range(2):
        for layer in ("layers.0", "layers.1"):
            snaps = [s for s in rec.records(f"module:{layer}", rank=rank) if s.module == layer]
            assert [(s.rank, s.world_size) for s in snaps] == [(rank, 2)] * 2
            for snap, eager in zip(snaps, expected[rank]["layers"][layer]):
                torch.testing.assert_close(snap.tensor, eager, rtol=1e-5, atol=1e-5)
    differing = {d.node for d in rec.compare_ranks()}   # each rank has its own batch: every layer differs
    assert differing and all(d.rank == 1 for d in rec.compare_ranks())


def test_pause_on_rank_1_only_set_and_continue_equals_eager_with_the_change(tmp_path):
    """Through `dynstep run ... -m torch.distributed.run`: rank 1 pauses, asks rank 0 (`p@0`), changes its own
    value and rank 0's (`set@0`, answered by rank 0 while it waits at the same node), both train on."""
    commands = "p value.mean(); p@0 value.mean(); ranks; set value = value * 0.5; set@0 value = value * 2; c"
    done = run(["-m", "dynstep", "run", "--pause", "module:layers.1", "--ranks", "1", "--commands", commands,
                "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", JOB, "--out", str(tmp_path)],
               env())
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert_trained_like(results(tmp_path), job.simulate(steps=2, scales={1: 0.5, 0: 2.0}))
    assert "rank 0 waits at stop #" in text and "rank 1 is paused at node" in text
    assert "[rank 0]" in text and "rank 1: paused (this prompt)" in text and "rank 0: waiting" in text
    assert text.count("── paused") == 2   # rank 1 only: step 0 (commands), step 1 (script ran out)


def test_q_on_one_rank_ends_every_rank(tmp_path):
    done = torchrun("--out", str(tmp_path), environ=env(pause="module:layers.1", ranks="1", commands="q"))
    text = done.stdout + done.stderr
    assert done.returncode != 0
    assert "dynstep: quitting every rank: quit at node x_3" in text
    assert "dynstep: rank 0 stops: quit at node x_3" in text
    assert text.count("exitcode  : 3") == 2, text[-3000:]
    assert not list(tmp_path.glob("rank*.json"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_that_dies_while_the_other_waits_ends_the_job_with_its_name(tmp_path):
    port = str(_free_port())
    # rank 1 pauses and dies at its prompt (SIGKILL: no goodbye), while rank 0 waits at the stop point
    die = "p __import__('os').kill(__import__('os').getpid(), 9)"
    environ = env(pause="module:layers.1", ranks="1", commands=die, dead_after="2")
    procs = [subprocess.Popen([sys.executable, JOB, "--out", str(tmp_path)], cwd=ROOT,
                              env={**environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r),
                                   "WORLD_SIZE": "2", "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    try:
        outs = [p.communicate(timeout=150)[0] for p in procs]
    finally:
        end_job(*procs)
    assert procs[1].returncode == -9
    assert procs[0].returncode == 3, outs[0][-3000:]
    assert "rank 1 is not responding (no heartbeat for" in outs[0]
    assert "while rank 0 waited at stop #" in outs[0] and "it may have died" in outs[0]


def test_the_paused_rank_prompts_on_the_launchers_terminal_when_its_output_is_hidden(tmp_path):
    """torchrun --local-ranks-filter 0 hides rank 1's stdout and stderr; rank 1 pauses anyway, and its
    stop and `[rank 1] (dynstep)` prompt reach the terminal torchrun runs in (a real pseudo-terminal)."""
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(sys.executable, ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                                           "--local-ranks-filter", "0", JOB, "--out", str(tmp_path)],
                          cwd=str(ROOT), env={**env(pause="module:layers.1", ranks="1"), "TERM": "dumb"},
                          encoding="utf-8", timeout=120, dimensions=(50, 200))
    try:
        child.expect_exact("[rank 1] (dynstep) ")
        child.sendline("p value.shape")
        child.expect_exact("torch.Size([3, 6, 16])")
        child.expect_exact("[rank 1] (dynstep) ")
        child.sendline("set value = value * 0.5")
        child.expect_exact("[rank 1] (dynstep) ")
        child.sendline("c")
        child.expect_exact("[rank 1] (dynstep) ")   # the next step's forward
        child.sendline("c")
        child.expect(pexpect.EOF)
    finally:
        child.close()
        end_job()
    assert child.exitstatus == 0, child.before
    assert_trained_like(results(tmp_path), job.simulate(steps=2, scales={1: 0.5}))


def test_step_all_advances_every_paused_rank_in_lockstep(tmp_path):
    done = torchrun("--out", str(tmp_path), environ=env(pause="module:layers.1", ranks="all", commands="s --all; c"))
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert len(re.findall(r"── paused · graph forward\[\d+/\d+\] · node x_3", text)) == 4  # both ranks, both steps
    assert len(re.findall(r"── step · graph forward\[\d+/\d+\] · node linear_8", text)) == 2  # both ranks, one node on
    assert "steps with the other paused ranks (step --all)" in text
    assert_trained_like(results(tmp_path), job.simulate(steps=2))


def test_a_compile_time_breakpoint_stops_only_the_ranks_that_pause(tmp_path):
    """dynstep.breakpoint() in each block: rank 1 stops at compile time (both blocks), rank 0 compiles on."""
    done = torchrun("--out", str(tmp_path), environ={**env(ranks="1", commands="locals; c; c"), "JOB_BREAKPOINT": "1"})
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert text.count("compile-time stop in forward") == 2, text[-3000:]
    assert "x = FakeTensor float32[3, 6, 16] cpu" in text
    assert text.count("dynstep: rank 0 compiles on past the compile-time stop at job.py:") == 2
    assert "rank 1 compiles on" not in text
    assert_trained_like(results(tmp_path), job.simulate(steps=2))


def test_one_debug_adapter_for_the_job_with_a_thread_per_rank(tmp_path):
    """`dynstep run --dap PORT --ranks all ... -m torch.distributed.run`: the client attaches to PORT once and
    sees rank 0 and rank 1 as threads; both stop at the pause at once, each is asked and answered on its own
    thread (`ranks`, `p@0` and `set` on rank 1), both continue; the job ends with `exited` 0 and the losses
    equal eager with rank 1's change. Every message is checked against the protocol's schema."""
    from ..dap.dap import Client

    port = _free_port_run(3)
    proc = _dap_job(port, tmp_path)
    try:
        client = _attach(Client, port)
        names = {}
        answers: dict[str, list[str]] = {}
        for step in range(2):   # both training steps pause on both ranks
            stops = [client.wait_event("stopped", timeout=90)["body"] for _ in range(2)]
            if step == 0:
                names = {t["id"]: t["name"] for t in client.request("threads")["threads"]}
            for stop in stops:
                assert stop["reason"] == "breakpoint" or stop["reason"] == "pause", stop
                rank = names[stop["threadId"]].split(" · ")[0]
                frame = client.request("stackTrace", {"threadId": stop["threadId"]})["stackFrames"][0]
                extra = ("p@0 value.shape", "set value = value * 0.5") if rank == "rank 1" and step == 0 else ()
                for line in ("value.shape", "ranks") + extra:
                    answers.setdefault(rank, []).append(
                        client.request("evaluate", {"expression": line, "frameId": frame["id"], "context": "repl"})["result"])
            for stop in stops:
                client.request("continue", {"threadId": stop["threadId"]})
        exited = client.wait_event("exited", timeout=120)["body"]
        out = proc.communicate(timeout=120)[0]
    finally:
        end_job(proc)
    assert proc.returncode == 0, out[-3000:]
    assert exited["exitCode"] == 0
    assert sorted(names.values()) == ["rank 0 · MainThread", "rank 1 · MainThread"], names
    assert "torch.Size([3, 6, 16])" in answers["rank 0"][0] and "torch.Size([3, 6, 16])" in answers["rank 1"][0]
    assert "rank 0: paused" in answers["rank 0"][1] and "rank 1: paused" in answers["rank 0"][1]
    assert answers["rank 1"][2] == "[rank 0]\nvalue.shape = torch.Size([3, 6, 16])"   # p@0, answered by rank 0
    outputs = [m["body"]["output"] for m in client.received if m.get("event") == "output"]
    assert "dynstep: rank 0 exited with code 0\n" in outputs and "dynstep: rank 1 exited with code 0\n" in outputs
    assert not [o for o in outputs if "refused" in o or "closed its connection" in o], outputs
    assert not client.invalid, client.invalid[:3]
    assert "the job's debug adapter listens on 127.0.0.1:" in out
    assert_trained_like(results(tmp_path), job.simulate(steps=2, scales={1: 0.5}))


def test_dynstep_attach_drives_every_rank_through_the_jobs_adapter(tmp_path):
    """`dynstep attach PORT` (commands on stdin) takes each rank's stop in turn, its prompt naming the rank."""
    port = _free_port_run(3)
    proc = _dap_job(port, tmp_path)
    try:
        for _ in range(100):    # until the launcher listens
            attach = subprocess.run([sys.executable, "-m", "dynstep", "attach", f"127.0.0.1:{port}"], env=env(),
                                    cwd=ROOT, input="p value.shape\nc\n" * 4, capture_output=True, text=True,
                                    timeout=150)
            if "cannot connect" not in attach.stderr:
                break
            time.sleep(0.2)
        out = proc.communicate(timeout=120)[0]
    finally:
        end_job(proc)
    assert proc.returncode == 0, out[-3000:]
    text = attach.stdout + attach.stderr
    assert attach.returncode == 0, text[-3000:]
    assert len(re.findall(r"── breakpoint · rank [01]: pause selector module:layers.1 at x_3", text)) == 4, text
    prompts = attach.stdout    # input() writes its prompt to stdout; the REPL's console is stderr
    assert prompts.count("[rank 0] (dynstep) ") == 4 and prompts.count("[rank 1] (dynstep) ") == 4, prompts
    assert attach.stderr.count("value.shape = torch.Size([3, 6, 16])") == 4
    assert "the program exited with code 0" in text
    assert_trained_like(results(tmp_path), job.simulate(steps=2))


def _dap_job(port: int, out: Path) -> subprocess.Popen:
    """Both ranks pause at layers.1; the job's adapter on `port` waits for a client."""
    return subprocess.Popen([sys.executable, "-m", "dynstep", "run", "--dap", str(port), "--wait", "--ranks", "all",
                             "--pause", "module:layers.1", "-m", "torch.distributed.run", "--nproc-per-node", "2",
                             "--standalone", JOB, "--out", str(out)], cwd=ROOT, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _free_port_run(count: int) -> int:
    """A port with `count` free ports from it (the job's adapter and one per local rank), below the
    kernel's ephemeral range: the job's own outgoing sockets (torchrun's store, gloo) cannot take them."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) \
        if Path("/proc/sys/net/ipv4/ip_local_port_range").exists() else 32768
    rng = __import__("random").Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low - count)
        if all(_is_free(port + i) for i in range(count)):
            return port
    raise RuntimeError("no run of free ports")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _attach(client_class, port: int):
    import time

    for _ in range(300):
        try:
            client = client_class(port, timeout=60)
            break
        except OSError:
            time.sleep(0.2)
    client.attach()
    client.request("configurationDone")
    return client
