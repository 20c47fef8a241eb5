"""The job's debug adapter (dap/job.py) in one process: two real DapServers stand in for the ranks'
servers, a validating client attaches to the adapter. The full job (torchrun, two ranks stopping at
once) is tests/jobs/test_jobs.py::test_one_debug_adapter_for_the_job_with_a_thread_per_rank."""

from __future__ import annotations

import random
import socket
import time

import pytest

from dynstep.dap import job as job_mod
from dynstep.dap.job import JobAdapter
from dynstep.dap.jobids import JobIds
from dynstep.dap.server import DapServer

from .dap import Client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ranks():
    servers = [DapServer("127.0.0.1", 0), DapServer("127.0.0.1", 0)]
    adapter = JobAdapter("127.0.0.1", 0, [("127.0.0.1", s.port) for s in servers])
    yield adapter, servers
    adapter.close()
    for s in servers:
        s.close()


def attached(adapter: JobAdapter) -> Client:
    client = Client(adapter.port, timeout=20)
    client.attach()
    return client


def test_ids_are_unique_per_rank_and_route_back():
    ids = JobIds(3)
    body = {"stackFrames": [{"id": 4, "source": {"sourceReference": 2}, "instructionPointerReference": "c1@8"}],
            "variablesReference": 0, "threadId": 1}
    up = ids.up(2, body, "stackTrace")
    assert up["variablesReference"] == 0 and up["threadId"] == 1 * 3 + 2
    assert up["stackFrames"][0]["id"] == 4 * 3 + 2
    assert up["stackFrames"][0]["source"]["sourceReference"] == 2 * 3 + 2
    assert up["stackFrames"][0]["instructionPointerReference"] == "2:c1@8"
    assert ids.route({"frameId": 4 * 3 + 2}) == 2 and ids.route({"threadId": 3}) == 0
    assert ids.route({"source": {"sourceReference": 8}}) == 2
    assert ids.route({"memoryReference": "1:c1@8"}) == 1 and ids.route({"expression": "x"}) is None
    assert ids.down({"variablesReference": 7 * 3 + 1, "memoryReference": "1:c1@8"}) == \
        {"variablesReference": 7, "memoryReference": "c1@8"}


def test_one_thread_per_rank_and_breakpoints_reach_every_rank(ranks):
    adapter, servers = ranks
    client = attached(adapter)
    bps = client.request("setFunctionBreakpoints", {"breakpoints": [{"name": "module:layers.1"}]})["breakpoints"]
    client.request("configurationDone")
    assert all(s.configured.wait(5) for s in servers)
    # every rank has the breakpoint, with the id the client was given
    assert [(b.id, b.kind) for s in servers for b in s.breakpoints.all()] == [(bps[0]["id"], "function")] * 2
    threads = client.request("threads")["threads"]
    assert sorted(t["name"] for t in threads) == ["rank 0 · MainThread", "rank 1 · MainThread"]
    assert len({t["id"] for t in threads}) == 2
    servers[1].output("loss 0.25\nstep 2")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any("loss" in str(m.get("body")) for m in client.received):
        time.sleep(0.05)
    outputs = [m["body"]["output"] for m in client.received if m.get("event") == "output"]
    assert "[rank 1] loss 0.25\n[rank 1] step 2\n" in outputs
    assert not client.invalid, client.invalid
    client.request("disconnect")
    client.close()
    for s in servers:
        assert s.disconnected.wait(5)      # each rank's server lost its client: the program runs on


def test_a_rank_that_starts_later_gets_the_whole_session(monkeypatch):
    monkeypatch.setattr(job_mod, "ATTACH_WAIT_S", 0.5)
    port = _free_port()
    first = DapServer("127.0.0.1", 0)
    adapter = JobAdapter("127.0.0.1", 0, [("127.0.0.1", first.port), ("127.0.0.1", port)])
    late = None
    try:
        client = attached(adapter)
        client.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:relu"}]})
        client.request("configurationDone")
        late = DapServer("127.0.0.1", port)
        assert late.configured.wait(10)           # the replay ended with configurationDone
        assert late.state == "configured"
        names = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(names) < 2:
            names = [t["name"] for t in client.request("threads")["threads"]]
        assert len(names) == 2
        outputs = [m["body"]["output"] for m in client.received if m.get("event") == "output"]
        assert any("not yet connected to local rank 1" in o for o in outputs), outputs
        assert not client.invalid, client.invalid
    finally:
        adapter.close()
        first.close()
        if late is not None:
            late.close()


def test_requests_for_no_rank_and_a_wrong_token_are_clear_errors():
    adapter = JobAdapter("0.0.0.0", 0, [], token="s3cret")
    try:
        client = Client(adapter.port, timeout=10)
        client.request("initialize", {"adapterID": "dynstep"})
        response = client.response("attach", {"token": "nope"})
        assert not response["success"] and "needs its token" in response["message"]
        client.close()
        client = Client(adapter.port, timeout=10)
        client.request("initialize", {"adapterID": "dynstep"})
        client.request("attach", {"token": "s3cret"})
        response = client.response("stackTrace", {"threadId": 1})
        assert not response["success"] and "no rank is connected to this job's debug adapter yet" in response["message"]
        assert not client.invalid, client.invalid
        client.close()
    finally:
        adapter.close()
    with pytest.raises(ValueError, match="needs a token"):
        JobAdapter("0.0.0.0", 0, [])


def test_the_jobs_token_reaches_every_rank():
    """Off loopback the job's adapter needs the token, and gives it to each rank's server in its attach."""
    worker = DapServer("127.0.0.1", 0, token="s3cret")
    adapter = JobAdapter("0.0.0.0", 0, [("127.0.0.1", worker.port)], token="s3cret")
    try:
        client = Client(adapter.port, timeout=20)
        client.attach(token="s3cret")
        client.request("configurationDone")
        assert worker.configured.wait(10) and worker.authenticated
        assert [t["name"] for t in client.request("threads")["threads"]] == ["rank 0 · MainThread"]
        client.close()
    finally:
        adapter.close()
        worker.close()


def test_malformed_messages_never_take_the_jobs_adapter_down(ranks):
    """The server's fuzz (test_protocol) against the job's adapter with two ranks behind it: every answer
    is a schema-valid message or the connection closes, and the adapter answers a clean client after."""
    from .test_protocol import _VALID, _fuzz, alive

    adapter, servers = ranks
    sent, answers = _fuzz(adapter.port, random.Random(21))
    assert sent >= 250 and answers and all(not m.get("success", True) or m["command"] in _VALID for m in answers)
    alive(adapter.port)
    client = attached(adapter)
    client.request("configurationDone")
    # `threads` names the ranks linked and answering within the adapter's 5 s (dap/job.py `_threads`); right
    # after the fuzz on a loaded machine that was none once (CI, 2026-11-26): ask again for up to 10 s
    deadline = time.monotonic() + 10
    while len(threads := client.request("threads")["threads"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(threads) == 2 and not client.invalid, threads
    client.close()


def test_the_client_keeps_its_own_breakpoint_ids_whatever_each_rank_numbers(monkeypatch):
    """Rank 1's server numbered breakpoints for an earlier client; rank 0 starts after the breakpoints were
    set. The client sees one id per breakpoint throughout: in the answer, in the late rank's `breakpoint`
    event, and in a stop's hitBreakpointIds from either rank."""
    monkeypatch.setattr(job_mod, "ATTACH_WAIT_S", 0.2)
    late_port = _free_port()
    busy = DapServer("127.0.0.1", 0)
    earlier = Client(busy.port, timeout=10)
    earlier.attach()
    earlier.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:cos"}, {"name": "op:sin"}, {"name": "op:tan"}]})
    earlier.request("disconnect")
    earlier.close()
    assert busy.disconnected.wait(5)
    adapter = JobAdapter("127.0.0.1", 0, [("127.0.0.1", late_port), ("127.0.0.1", busy.port)])
    late = None
    try:
        client = attached(adapter)
        (bp,) = client.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:relu"}]})["breakpoints"]
        client.request("configurationDone")
        assert bp["id"] == 1 and [b.id for b in busy.breakpoints.all()] == [4]   # rank 1 numbers it 4
        late = DapServer("127.0.0.1", late_port)
        changed = client.wait_event("breakpoint", timeout=10)["body"]       # rank 0 joins and answers for it
        assert changed["reason"] == "changed" and changed["breakpoint"]["id"] == 1
        conn = adapter.conn
        for worker, own in ((adapter.workers[0], 1), (adapter.workers[1], 4)):
            adapter._from_worker(worker, {"type": "event", "event": "stopped", "body": {
                "reason": "function breakpoint", "threadId": 1, "hitBreakpointIds": [own]}}, conn)
            stop = client.wait_event("stopped", timeout=10)["body"]
            assert stop["hitBreakpointIds"] == [1] and stop["description"].startswith(f"rank {worker.index}:")
        assert not client.invalid, client.invalid
        client.close()
    finally:
        adapter.close()
        busy.close()
        if late is not None:
            late.close()


def test_a_rank_that_stops_reading_is_dropped_not_waited_for():
    """A send to a peer that never reads fails after the send timeout (the job's adapter drops that rank)
    instead of blocking the adapter, which holds its lock while it sends."""
    from dynstep.dap.client import DapClient

    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = DapClient("127.0.0.1", listener.getsockname()[1], send_timeout=0.3)
        peer, _ = listener.accept()          # accepted, never read
        started = time.monotonic()
        try:
            with pytest.raises(OSError):
                for _ in range(10_000):
                    client.send("evaluate", {"expression": "x" * 100_000}, on_response=lambda msg: None)
            assert time.monotonic() - started < 30
        finally:
            client.close()
            peer.close()


def _bad_dap():
    from ..test_hostile import BAD_DAP

    return BAD_DAP


@pytest.mark.parametrize("messages,words", _bad_dap(), ids=[str(m[-1])[:70] for m, _ in _bad_dap()])
def test_the_jobs_adapter_answers_a_session_out_of_order_as_the_server_does(messages, words):
    """The job's adapter is the server's endpoint (dap/endpoint.py, dap/session.py): before attach, a wrong
    token, launch, a disconnect that would end the job and malformed messages get the server's answers
    (tests/test_hostile.py::test_bad_dap_messages_before_attach sends the same to a server)."""
    from .test_reliability import _ask

    adapter = JobAdapter("127.0.0.1", 0, [], token="s3cret")
    try:
        answers = _ask(adapter.port, messages)
        assert answers and not answers[-1]["success"] and words in answers[-1]["message"], answers
        assert not adapter.terminating and not adapter.session.attached
    finally:
        adapter.close()
