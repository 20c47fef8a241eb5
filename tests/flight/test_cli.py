"""The flight recorder from a shell: `dynstep run --flight`, `DYNSTEP_FLIGHT=DIR`, SIGTERM, an exception
ending the script, and `dynstep report` on a dump, each in a subprocess as a user runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import dynstep

from ..conftest import ROOT

LOOPS = os.path.join(ROOT, "tests", "flight", "loops.py")


def env(**extra):
    base = {k: v for k, v in os.environ.items() if not k.startswith("DYNSTEP_")}
    return {**base, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def dynstep_run(*args, cwd=ROOT, timeout=600, **extra):
    return subprocess.run([sys.executable, "-m", "dynstep", "run", *args], cwd=cwd, env=env(**extra),
                          capture_output=True, text=True, timeout=timeout)


class Lines:
    """A pipe read to its end on a thread of its own: a test waits for a line with a bound, never on a read."""

    def __init__(self, pipe) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe) -> None:
        for line in pipe:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def wait_for(self, prefix: str, seconds: float) -> bool:
        """Whether a line starting with `prefix` came within `seconds` (False also when the pipe closed first)."""
        deadline = time.monotonic() + seconds
        with self.changed:
            while not any(line.startswith(prefix) for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or not self.thread.is_alive():
                    return False
                self.changed.wait(min(left, 1.0))
        return True

    def text(self, until_closed: float = 0.0) -> str:
        self.thread.join(until_closed)
        with self.changed:
            return "".join(self.lines)


def dumps_in(folder):
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.exists() else []


def test_dynstep_run_flight_dumps_a_planted_nan(tmp_path):
    out = dynstep_run("--flight", str(tmp_path / "d"), "--flight-steps", "3", LOOPS, "--steps", "8", "--nan-at", "5")
    assert out.returncode == 0, out.stderr
    (dump,) = dumps_in(tmp_path / "d")
    assert dump.name.endswith("-rank0-nonfinite")
    rec = dynstep.load(dump)
    assert (rec.trigger.step, rec.trigger.module, rec.trigger.source) == (5, "blocks.1.mlp.fc", "model.py:44")
    assert sorted({s.step for s in rec.all()}) == [2, 3, 4, 5]


def test_a_bare_flight_before_the_script_dumps_under_the_default_folder(tmp_path):
    out = dynstep_run("--flight", LOOPS, "--steps", "5", "--nan-at", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (dump,) = dumps_in(tmp_path / "dynstep-flight")
    assert dynstep.load(dump).trigger.step == 3


def test_with_no_trigger_nothing_is_written(tmp_path):
    out = dynstep_run("--flight", str(tmp_path / "d"), LOOPS, "--steps", "4")
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.xfail(
    strict=False, reason="known defect: under two test workers on two cores the SIGINT run sometimes does not end "
                         "within 120 s of the signal (passes alone; see the issue 28 note of 2026-11-25)"))])
def test_a_signal_dumps_then_the_process_ends_as_it_would_have(tmp_path, signum):
    """SIGTERM: the process dies by the signal after the dump; SIGINT: KeyboardInterrupt after it (exit 130)."""
    proc = subprocess.Popen([sys.executable, "-m", "dynstep", "run", "--flight", str(tmp_path / "d"), LOOPS,
                             "--steps", "10000", "--sleep", "0.05"], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = Lines(proc.stdout), Lines(proc.stderr)    # both pipes drained: a full one would stop the script
    try:
        assert out.wait_for("step 4 ", 300), f"no 'step 4' line within 300 s:\n{out.text()}\n{err.text()}"
        proc.send_signal(signum)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    stderr = err.text(until_closed=10)
    assert proc.returncode == (-signal.SIGTERM if signum == signal.SIGTERM else 130), stderr
    assert signum == signal.SIGTERM or "KeyboardInterrupt" in stderr
    (dump,) = dumps_in(tmp_path / "d")
    rec = dynstep.load(dump)
    name = signal.Signals(signum).name
    assert rec.trigger.kind == "signal" and rec.trigger.reason == f"{name} received" and rec.trigger.step >= 4
    assert rec.flight.last_step == rec.trigger.step and len(rec) > 0


def test_dynstep_flight_env_and_an_exception_ending_a_plain_python_run(tmp_path):
    """A script compiling with backend="superstep" and no options, run by plain python: DYNSTEP_FLIGHT=DIR
    turns the recorder on; the uncaught exception is dumped before Python prints it."""
    out = subprocess.run([sys.executable, LOOPS, "--superstep", "--steps", "8", "--raise-at", "3"], cwd=tmp_path,
                         env=env(DYNSTEP_FLIGHT=str(tmp_path / "d"), DYNSTEP_FLIGHT_STEPS="2"),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 1 and "the script gave up at step 3" in out.stderr
    (dump,) = dumps_in(tmp_path / "d")
    rec = dynstep.load(dump)
    assert rec.trigger.kind == "exception" and rec.trigger.reason == "RuntimeError: the script gave up at step 3"
    assert rec.flight.steps == 2 and sorted({s.step for s in rec.all()}) == [1, 2, 3]


def test_an_exception_under_dynstep_run_is_dumped(tmp_path):
    out = dynstep_run("--flight", str(tmp_path / "d"), LOOPS, "--steps", "8", "--raise-at", "2")
    assert out.returncode == 1 and "the script gave up at step 2" in out.stderr
    (dump,) = dumps_in(tmp_path / "d")
    assert dynstep.load(dump).trigger.kind == "exception"


def test_bad_flight_arguments_are_refused_before_the_script_runs(tmp_path):
    out = dynstep_run("--flight-steps", "3", LOOPS)
    assert out.returncode == 2 and "go with --flight" in out.stderr
    out = dynstep_run("--flight", str(tmp_path), "--flight-on", "nonfinite,bogus", LOOPS)
    assert out.returncode == 2 and "unknown trigger rule 'bogus'" in out.stderr
    out = dynstep_run(LOOPS, DYNSTEP_FLIGHT_STEPS="many")
    assert out.returncode == 2 and "DYNSTEP_FLIGHT_STEPS" in out.stderr


def test_dynstep_report_on_a_dump_shows_the_trigger_and_the_lead_up(tmp_path):
    dynstep_run("--flight", str(tmp_path / "d"), "--flight-steps", "3", LOOPS, "--steps", "6", "--nan-at", "4")
    (dump,) = dumps_in(tmp_path / "d")
    out = subprocess.run([sys.executable, "-m", "dynstep", "report", str(dump), "-o", str(tmp_path / "r.html")],
                         cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "flight recorder: nonfinite at step 4, node " in out.stdout and "(steps 1..4 in the dump)" in out.stdout
    assert "first NaN/Inf: value of node linear" in out.stdout                 # the trigger's hit, not the mask's -inf
    page = (tmp_path / "r.html").read_text()
    assert 'id="leadup"' in page and "Lead-up: nonfinite at step 4" in page


def test_dump_without_a_recorder_says_how_to_start_one():
    out = subprocess.run([sys.executable, "-c", "import dynstep; print(dynstep.flight.watch('loss', 2.5)); "
                          "dynstep.flight.dump()"], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and out.stdout.strip() == "2.5"
    assert "no flight recorder is running; compile with options={'flight': True}" in out.stderr
