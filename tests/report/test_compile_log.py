"""Graph breaks, recompiles and compiles collected from torch's structured trace, tied to user lines."""

from __future__ import annotations

import logging

import torch

from dynstep._compat import TRACE_LOGGER
from dynstep.recording.compile_log import COMPILE_LOG, CompileLog, collecting
from dynstep.recording.facts import CompileEvent, GraphPlan, dedupe


def breaks_and_changes(x, k):
    y = torch.sin(x) * k
    print("a graph break")                       # BREAK_LINE
    return y.cos() + k


LINE = breaks_and_changes.__code__.co_firstlineno


def _new_events(start: int) -> list[CompileEvent]:
    return [e for e in COMPILE_LOG.entries()[start:] if isinstance(e, CompileEvent)]


def test_graph_breaks_and_recompiles_name_the_users_line_and_text():
    start = len(COMPILE_LOG.entries())
    with collecting():
        f = torch.compile(breaks_and_changes, backend="eager")
        f(torch.randn(4), 2)
        f(torch.randn(4), 3)          # a constant changes: recompile of both frames
        f(torch.randn(8), 3)          # a size changes: recompile, reason without a user frame
    events = _new_events(start)
    breaks = [e for e in events if e.kind == "graph_break"]
    assert {(e.file, e.line, e.function) for e in breaks} == {(__file__, LINE + 2, "breaks_and_changes")}
    assert breaks[0].reason == "Failed to trace builtin operator"
    assert breaks[0].source_text == 'print("a graph break")                       # BREAK_LINE'
    assert "Explanation:" in breaks[0].detail and "Traceback" not in breaks[0].detail
    recompiles = [e for e in events if e.kind == "recompile"]
    assert recompiles[0].compile_id == "0/1" and recompiles[0].reason == "guard failed: 0/0: k == 2"
    assert (recompiles[0].line, recompiles[0].source_text) == (LINE + 1, "y = torch.sin(x) * k")
    size = next(e for e in recompiles if "size mismatch" in e.reason and e.function == "breaks_and_changes")
    assert size.line == LINE and size.source_text.startswith("def breaks_and_changes")   # the compile that followed
    compiles = [e.compile_id for e in events if e.kind == "compile"]
    assert compiles[:2] == ["0/0", "1/0"] and len(compiles) == 6
    (once,) = [e for e in dedupe(events) if e.kind == "graph_break"]
    assert once.count == 3


def test_collecting_is_nestable_and_leaves_the_trace_logger_as_it_was():
    logger = logging.getLogger(TRACE_LOGGER)
    before = list(logger.handlers)
    log = CompileLog()
    log.acquire()
    log.acquire()
    assert len(logger.handlers) == len(before) + 1 and log.collecting
    log.release()
    assert log.collecting and len(logger.handlers) == len(before) + 1
    log.release()
    assert logger.handlers == before and not log.collecting


def test_nothing_is_collected_outside_a_session_or_run():
    start = len(COMPILE_LOG.entries())
    torch.compile(breaks_and_changes, backend="eager")(torch.randn(3), 1)
    assert _new_events(start) == []


def test_a_failing_listener_never_reaches_torch_compile():
    def boom(entry):
        raise RuntimeError("listener bug")

    remove = COMPILE_LOG.listen(boom)
    try:
        with collecting():
            out = torch.compile(breaks_and_changes, backend="eager")(torch.zeros(2), 1)
    finally:
        remove()
    assert torch.equal(out, torch.full((2,), 2.0))


def test_a_recompile_without_a_line_waits_for_its_compile_and_recordings_take_their_share():
    log = CompileLog()
    seen: list = []
    log.listen(seen.append)
    plan = GraphPlan("f[0/0]", "0/0", "eager", (), ())
    log.add(plan)
    since = log.mark()
    log.add(CompileEvent("recompile", "0/1", "", 0, "", "guard failed: size"))     # held: no line yet
    assert seen == [plan]
    log.add(CompileEvent("compile", "0/1", "a.py", 1, "f", "compiling f"))
    assert [(e.kind, e.line) for e in seen[1:]] == [("recompile", 1), ("compile", 1)]
    kept = log.for_recording(since, {"f[0/0]", "g[0/0]"})
    assert kept[0] is plan and [e.kind for e in kept[1:]] == ["recompile", "compile"]
    assert log.for_recording(log.mark(), set()) == []
