"""Where events go: `use_sink` captures what its own context emits (core/events.py), and nothing of
other threads; everything else goes to the one default sink (core/wiring.py)."""

from __future__ import annotations

import threading

import pytest
import torch

from dynstep.core import wiring
from dynstep.core.events import Info, ProbePrinted, Warning_, emit, use_sink


def _relu_plus(x):
    return torch.relu(x) + 1


@pytest.fixture
def default_sink():
    """What reaches the default sink meanwhile (the terminal's, or the DAP server's output events)."""
    previous = wiring.default_sink()
    seen: list[object] = []
    wiring.install_sink(seen.append)
    try:
        yield seen
    finally:
        wiring.install_sink(previous)


def test_two_threads_capturing_at_once_each_see_only_their_own():
    """Two threads call one compiled program with a `print` probe, each inside its own use_sink, both
    captures open at the same time: each gets the prints of its own calls (its own input's max)."""
    compiled = torch.compile(_relu_plus, backend="superstep",
                             options={"inner": "eager", "probe": ["op:relu"], "actions": ["print"]})
    with use_sink(lambda e: None):
        compiled(torch.zeros(4))                           # compiled here, once
    both_open, all_called = threading.Barrier(2, timeout=60), threading.Barrier(2, timeout=60)
    seen: dict[int, list[object]] = {1: [], 2: []}
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            with use_sink(seen[k].append):
                both_open.wait()
                for _ in range(5):
                    compiled(torch.full((4,), float(k)))
                all_called.wait()
        except BaseException as exc:   # noqa: BLE001 - the test shows it
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for k in (1, 2):
        assert [type(e) for e in seen[k]] == [ProbePrinted] * 5, (k, seen[k])
        assert {e.snapshot.stats.max for e in seen[k]} == {float(k)}, (k, seen[k])


def test_another_threads_warning_goes_to_the_default_sink_not_into_a_capture(default_sink):
    """A thread that emits while another captures (the DAP reader thread's warnings while the program
    thread answers a console command) reaches the default sink; the capture keeps only its own."""
    captured: list[object] = []
    emitted = threading.Event()

    def reader() -> None:
        emit(Warning_("closing the client's connection"))
        emitted.set()

    with use_sink(captured.append):
        emit(Info("mine"))
        t = threading.Thread(target=reader)
        t.start()
        assert emitted.wait(30)
        t.join(30)
        emit(Info("mine too"))
    assert captured == [Info("mine"), Info("mine too")]
    assert default_sink == [Warning_("closing the client's connection")]


def test_nested_captures_give_back_the_outer_one(default_sink):
    outer: list[object] = []
    inner: list[object] = []
    with use_sink(outer.append):
        emit(Info("a"))
        with use_sink(inner.append):
            emit(Info("b"))
        emit(Info("c"))
    emit(Info("d"))
    assert outer == [Info("a"), Info("c")] and inner == [Info("b")] and default_sink == [Info("d")]
