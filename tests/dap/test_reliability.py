"""Reliability round 3 over DAP (issue 26): each test is named after the item of the issue it pins.

In-process where a server and a program thread are enough (test_stops.py's pattern); `dynstep run
--dap` in a subprocess where the program's end, its exit code or its stderr is what is checked.
Every message the server sends is validated against the protocol's JSON schema (dap.py).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

import jsonschema
import pytest
import torch

import dynstep
from dynstep.dap import protocol
from dynstep.dap.api import serve_dap, stop_serving
from dynstep.dap.job import JobAdapter
from dynstep.dap.server import DapServer

from .dap import MODEL, SCHEMA, Client, start_program, validate
from .test_protocol import _messages, frame, raw_exchange
from .test_stops import run_in_thread, variables

REQUESTS = sorted(name[:-len("Request")][:1].lower() + name[1:-len("Request")]
                  for name in SCHEMA["definitions"] if name.endswith("Request") and name != "Request")


def stop_and_frames(c: Client, timeout: float | None = None) -> tuple[dict, list[dict]]:
    stopped = c.wait_event("stopped", timeout=timeout)["body"]
    return stopped, c.request("stackTrace", {"threadId": stopped["threadId"]})["stackFrames"]


# -- 1. before a successful attach nothing but initialize is served ------------------------------------

@pytest.fixture(params=["process", "job"])
def guarded(request):
    """A token-protected server: the process's own, or a job's adapter (no rank connected)."""
    server = DapServer("127.0.0.1", 0, token="s3cret") if request.param == "process" else \
        JobAdapter("127.0.0.1", 0, [("127.0.0.1", 1)], token="s3cret")
    yield server
    server.close()


def _ask(port: int, messages: list[dict]) -> list[dict]:
    """Send the messages on one connection; the responses (validated), as soon as each message has one
    or the server closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"".join(frame(m) for m in messages))
        buf, deadline = b"", time.monotonic() + 10
        while time.monotonic() < deadline:
            answers = [m for m in _messages(buf) if m["type"] == "response"]
            if len(answers) >= len(messages):
                return answers
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            buf += chunk
    return [m for m in _messages(buf) if m["type"] == "response"]


def _gone(server) -> bool:
    deadline = time.monotonic() + 10
    while server.conn is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    return server.conn is None


def test_26_01_before_attach_every_request_but_initialize_gets_an_error_and_does_nothing(guarded):
    assert len(REQUESTS) > 40 and "disconnect" in REQUESTS and "terminate" in REQUESTS
    init = {"seq": 1, "type": "request", "command": "initialize", "arguments": {"adapterID": "x"}}
    for name in REQUESTS:
        args = {"terminateDebuggee": True, "threadId": 1, "expression": "exit(3)", "token": "wrong"}
        cold = _ask(guarded.port, [{"seq": 1, "type": "request", "command": name, "arguments": args}])
        warm = _ask(guarded.port, [init, {"seq": 2, "type": "request", "command": name, "arguments": args}])
        assert cold and cold[0]["success"] is (name == "initialize"), (name, cold)
        assert warm[0]["success"] and not warm[1]["success"], (name, warm)
    assert _gone(guarded)
    assert not (guarded.terminating if isinstance(guarded, DapServer) else guarded.ended.is_set())


def test_26_01_a_client_with_no_token_cannot_kill_a_token_protected_program():
    proc, port = start_program("--dap-token", "s3cret", "--inner", "eager", MODEL, "0", "3", address="127.0.0.1:0")
    try:
        answers = _ask(port, [{"seq": 1, "type": "request", "command": "disconnect",
                               "arguments": {"terminateDebuggee": True}}])
        assert answers[0]["success"] is False and "has not attached" in answers[0]["message"]
        assert proc.wait(240) == 0, proc.err()        # the program ran to its end: rc 0, not 130
        assert "block done" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()


# -- 5. an expression that ends the program is answered, then exited and terminated ------------------------

@pytest.mark.parametrize("expression,code", [("exit(3)", 3), ("(_ for _ in ()).throw(KeyboardInterrupt)", 130)],
                         ids=["exit-3", "KeyboardInterrupt"])
def test_26_05_evaluate_that_ends_the_program_is_answered_then_exited_and_terminated(expression, code):
    proc, port = start_program("--wait", "--inner", "eager", "--pause", "module:proj", MODEL)
    c = Client(port)
    try:
        c.attach()
        c.request("configurationDone")
        stopped, frames = stop_and_frames(c, timeout=240)
        answer = c.response("evaluate", {"expression": expression, "frameId": frames[0]["id"], "context": "repl"})
        assert answer["success"] is False and "the program is ending" in answer["message"]
        assert c.wait_event("exited", timeout=60)["body"]["exitCode"] == code
        c.wait_event("terminated", timeout=30)
        assert c.closed.wait(30) and proc.wait(60) == code
        assert c.invalid == []
    finally:
        c.close()
        if proc.poll() is None:
            proc.kill()


# -- 6. a message nested 100,000 deep, and one over the size bound ---------------------------------------

@pytest.fixture
def server():
    srv = DapServer("127.0.0.1", 0, frame_timeout=2.0)
    yield srv
    srv.close()


def test_26_06_json_nested_100000_deep_is_refused_with_an_error_response(server, monkeypatch):
    died: list[object] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    deep = b'{"seq":5,"type":"request","command":"evaluate","arguments":{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    received, closed = raw_exchange(server.port, b"Content-Length: %d\r\n\r\n" % len(deep) + deep, wait=5,
                                    until_closed=True)
    answer = next(m for m in received if m["type"] == "response")
    assert closed and answer["request_seq"] == 5 and answer["command"] == "evaluate" and not answer["success"]
    assert f"nested deeper than {protocol.MAX_DEPTH} levels" in answer["message"]
    assert any("closing the connection" in m["body"]["output"] for m in received if m["type"] == "event")
    shallow_enough = {"seq": 1, "type": "request", "command": "initialize",
                      "arguments": {"x": json.loads("[" * (protocol.MAX_DEPTH - 2) + "]" * (protocol.MAX_DEPTH - 2))}}
    assert _ask(server.port, [shallow_enough])[0]["success"]
    over = b"Content-Length: %d\r\n\r\n" % (protocol.MAX_BODY_BYTES + 1)
    received, closed = raw_exchange(server.port, over, wait=5, until_closed=True)
    assert closed and "over the limit of 16777216 bytes" in received[0]["message"]
    assert died == []                                 # no reader thread died


# -- 10. seq 0 (nvim-dap before Dec 2023) ---------------------------------------------------------------------

def test_26_10_a_first_request_numbered_0_is_answered(server):
    answers = _ask(server.port, [{"seq": 0, "type": "request", "command": "initialize", "arguments": {"adapterID": "x"}},
                                 {"seq": 1, "type": "request", "command": "attach", "arguments": {}},
                                 {"seq": 2, "type": "request", "command": "threads"}])
    assert [(a["request_seq"], a["command"], a["success"]) for a in answers] == [
        (0, "initialize", True), (1, "attach", True), (2, "threads", True)]


@pytest.mark.parametrize("body", [b"{}{}{", b"[]", b'{"seq": "1", "command": "threads"}', b'{"seq": -4}'],
                         ids=["not-json", "array", "string-seq", "negative-seq"])
def test_26_10_a_malformed_message_gets_an_error_response_before_the_connection_closes(server, body):
    received, closed = raw_exchange(server.port, b"Content-Length: %d\r\n\r\n" % len(body) + body, wait=3,
                                    until_closed=True)
    assert closed and received[0]["type"] == "response" and received[0]["success"] is False
    assert received[0]["request_seq"] == 0 and "closing the connection" in received[0]["message"]


# -- in-process stops ------------------------------------------------------------------------------------------

@pytest.fixture
def served():
    srv = serve_dap(0)
    client = Client(srv.port, timeout=60)
    client.attach()
    yield client
    client.close()
    stop_serving(None)


def _nan_target(lin, x):
    h = lin(x) - 100.0
    bad = torch.log(h) * 2          # the line the exception stop must show
    return bad + 1


def test_26_11_an_exception_stop_shows_the_users_line(served):
    c = served
    c.request("setExceptionBreakpoints", {"filters": ["nan"]})
    c.request("configurationDone")
    lin = torch.nn.Linear(4, 4)
    fn = torch.compile(_nan_target, backend=dynstep.superstep(inner="eager", nan="stop"))
    thread, out = run_in_thread(lambda: fn(lin, torch.randn(2, 4)))
    stopped, frames = stop_and_frames(c)
    assert stopped["reason"] == "exception"
    line = _nan_target.__code__.co_firstlineno + 2
    users = [f for f in frames if f["source"].get("path") == os.path.abspath(__file__)]
    assert users and users[0]["line"] == line and "torch.log(h)" in users[0]["name"]
    assert frames.index(users[0]) <= 1                       # right after the graph listing, if any
    c.request("continue", {"threadId": stopped["threadId"]})
    thread.join(60)
    assert torch.isnan(out["result"]).all() and c.invalid == []


def _frames_target(x, w):
    h = x @ w
    y = torch.relu(h)               # a function breakpoint (op:relu) stops here
    return y * 2


def test_26_12_hover_and_watch_in_a_user_frame_see_that_frames_names(served):
    c = served
    c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:relu"}]})
    c.request("configurationDone")
    fn = torch.compile(_frames_target, backend=dynstep.superstep(inner="eager"))
    x, w = torch.full((3, 4), 2.0), torch.ones(4, 5)
    thread, out = run_in_thread(lambda: fn(x, w))
    stopped, frames = stop_and_frames(c)
    user = next(f for f in frames if f["source"].get("path") == os.path.abspath(__file__))
    assert user["line"] == _frames_target.__code__.co_firstlineno + 2
    assert [f["name"] for f in frames].count("_frames_target") == 0     # the Python frame is this one, not twice

    def ev(expr, context):
        return c.response("evaluate", {"expression": expr, "frameId": user["id"], "context": context})

    assert ev("x", "hover")["body"]["result"].startswith("f32[3, 4] cpu  min 2")       # a real local
    assert ev("w.shape", "watch")["body"]["result"] == "torch.Size([4, 5])"
    assert ev("h.sum().item()", "watch")["body"]["result"] == "120.0"                   # h = x @ w, this frame's
    assert ev("y", "hover")["body"]["result"].startswith("f32[3, 5]")                  # the line's own variable
    missing = ev("nothere + 1", "repl")
    assert not missing["success"] and "'nothere' is not available in this frame" in missing["message"]
    assert "Here: " in missing["message"] and "x" in missing["message"].split("Here: ")[1]
    scopes = c.request("scopes", {"frameId": user["id"]})["scopes"]
    assert [s["name"] for s in scopes] == ["Node", "This frame", "Site"]
    here = set(variables(c, scopes[1]["variablesReference"]))
    assert {"x", "w"} <= here and "h" in here | set(variables(c, scopes[0]["variablesReference"]))
    c.request("setFunctionBreakpoints", {"breakpoints": []})
    c.request("continue", {"threadId": stopped["threadId"]})
    thread.join(60)
    assert torch.equal(out["result"], torch.relu(x @ w) * 2) and c.invalid == []


def _long_target(x):
    return torch.relu(x) + 1


def test_26_13_loaded_sources_and_continued_events(served):
    c = served
    fn = torch.compile(_long_target, backend=dynstep.superstep(inner="eager"))
    c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:relu"}]})
    c.request("configurationDone")
    thread, out = run_in_thread(lambda: [fn(torch.ones(3)) for _ in range(2)])
    kept: list[dict] = []
    stopped = c.wait_event("stopped", keep=kept)["body"]
    tid = stopped["threadId"]
    new = [e["body"]["source"] for e in kept if e.get("event") == "loadedSource"]
    assert new and new[0]["name"].endswith(".graph.py") and new[0]["sourceReference"] > 0
    sources = c.request("loadedSources")["sources"]
    assert new[0]["sourceReference"] in [s.get("sourceReference") for s in sources]
    assert os.path.abspath(__file__) in [s.get("path") for s in sources]
    c.request("next", {"threadId": tid})
    kept = []
    c.wait_event("stopped", keep=kept)                          # the next node: resumed, then stopped again
    assert {"threadId": tid, "allThreadsContinued": False} in [e["body"] for e in kept if e.get("event") == "continued"]
    c.request("setFunctionBreakpoints", {"breakpoints": []})
    c.request("continue", {"threadId": tid})
    assert c.wait_event("continued")["body"] == {"threadId": tid, "allThreadsContinued": False}
    thread.join(60)
    assert len(out["result"]) == 2 and c.invalid == []


def _rows_target(x):
    return torch.relu(x) * 2


@pytest.mark.parametrize("paging", [False, True], ids=["no-paging", "paging"])
def test_26_13_a_large_tensor_pages_for_any_client(paging):
    srv = serve_dap(0)
    c = Client(srv.port, timeout=60)
    try:
        c.request("initialize", {"adapterID": "x", **({"supportsVariablePaging": True} if paging else {})})
        c.request("attach", {})
        c.wait_event("initialized")
        c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:relu"}]})
        c.request("configurationDone")
        fn = torch.compile(_rows_target, backend=dynstep.superstep(inner="eager"))
        x = torch.arange(250 * 3, dtype=torch.float32).reshape(250, 3)
        thread, out = run_in_thread(lambda: fn(x))
        stopped, frames = stop_and_frames(c)
        node = c.request("scopes", {"frameId": frames[0]["id"]})["scopes"][0]["variablesReference"]
        value = variables(c, node)["value"]
        plain = [v["name"] for v in c.request("variables", {"variablesReference": value["variablesReference"]})[
            "variables"]]
        paged = c.request("variables", {"variablesReference": value["variablesReference"], "start": 5, "count": 3})
        assert [v["name"] for v in paged["variables"]] == ["[1]", "[2]", "[3]"]   # after the 4 named children
        if paging:
            assert plain[4:] == [f"[{i}]" for i in range(100)]
        else:
            assert plain == ["shape", "dtype", "device", "stats", "[0:100]", "[100:200]", "[200:250]"]
            group = variables(c, value["variablesReference"])["[200:250]"]
            rows = variables(c, group["variablesReference"])
            assert list(rows) == [f"[{i}]" for i in range(200, 250)] and rows["[249]"]["evaluateName"] == "value[249]"
            c.request("setVariable", {"variablesReference": group["variablesReference"], "name": "[249]",
                                      "value": "torch.zeros(3)"})
        c.request("setFunctionBreakpoints", {"breakpoints": []})
        c.request("continue", {"threadId": stopped["threadId"]})
        thread.join(60)
        assert out["result"][249].tolist() == ([1494.0, 1496.0, 1498.0] if paging else [0.0, 0.0, 0.0])
        assert c.invalid == []
    finally:
        c.close()
        stop_serving(None)


# -- 13. the end of a session: disconnect with terminateDebuggee, and the launcher's frame --------------------

def test_26_13_disconnect_terminating_the_program_sends_exited_and_terminated_and_hides_the_launcher():
    script = os.path.join(os.path.dirname(sys.executable), "dynstep")
    if not os.path.exists(script):
        pytest.skip("the dynstep console script is not installed (pip install -e .)")
    proc, port = start_program("--wait", "--inner", "eager", "--pause", "module:proj", MODEL, "0", "30",
                               launcher=[script])
    c = Client(port)
    try:
        c.attach()
        c.request("configurationDone")
        stopped, frames = stop_and_frames(c, timeout=240)
        outermost = frames[-1]
        assert outermost["source"]["path"] == MODEL and outermost["name"] == "<module>", frames[-1]
        assert not any(f["source"].get("path") == script for f in frames)
        c.request("disconnect", {"terminateDebuggee": True})
        kept: list[dict] = []
        c.wait_event("terminated", timeout=60, keep=kept)
        assert [e["body"]["exitCode"] for e in kept if e.get("event") == "exited"] == [1]   # dynstep.Abort
        assert c.closed.wait(30) and proc.wait(60) == 1
        assert "terminated by the debug client" in proc.err()
        assert c.invalid == []
    finally:
        c.close()
        if proc.poll() is None:
            proc.kill()


def test_schema_relaxation_is_only_request_seq_zero():
    answer = {"seq": 3, "type": "response", "request_seq": 0, "command": "", "success": False, "message": "x",
              "body": {"error": {"id": 1, "format": "x"}}}
    validate(answer)
    with pytest.raises(jsonschema.ValidationError):
        validate({**answer, "seq": 0})                 # the server's own seq still starts at 1
    with pytest.raises(jsonschema.ValidationError):
        validate({k: v for k, v in answer.items() if k != "body"})
