"""Bad input never crashes or hangs the debugged program: malformed frames close the connection,
malformed requests get an error response, and a program compiled with probes keeps every record
while a seeded fuzzer throws a few hundred broken messages at its server. Plus security: loopback
by default, a token off loopback, one client at a time.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time

import pytest
import torch

import dynstep
from dynstep.dap.server import DapServer

from .dap import Client, validate

FRAME_TIMEOUT = 0.3


@pytest.fixture
def server():
    srv = DapServer("127.0.0.1", 0, frame_timeout=FRAME_TIMEOUT)
    yield srv
    srv.close()


def frame(msg: object) -> bytes:
    body = json.dumps(msg).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def raw_exchange(port: int, data: bytes, *, close_after: bool = False, wait: float = 2.0,
                 until_closed: bool = False) -> tuple[list[dict], bool]:
    """Send bytes; (messages received, whether the server closed the connection). Returns at the first
    response unless `until_closed` (then it reads until the server closes or `wait` passes)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        sock.sendall(data)
        if close_after:
            sock.shutdown(socket.SHUT_WR)
        buf, closed, deadline = b"", False, time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            buf += chunk
            if b"request_seq" in buf and not close_after and not until_closed and _complete(buf):
                break
        return _messages(buf), closed
    finally:
        sock.close()


def _complete(buf: bytes) -> bool:
    try:
        return bool(_messages(buf))
    except ValueError:
        return False


def _messages(buf: bytes) -> list[dict]:
    out = []
    while (end := buf.find(b"\r\n\r\n")) >= 0:
        length = int(buf[:end].split(b":")[1])
        if len(buf) < end + 4 + length:
            break
        msg = json.loads(buf[end + 4:end + 4 + length])
        validate(msg)
        out.append(msg)
        buf = buf[end + 4 + length:]
    return out


def alive(port: int) -> None:
    c = Client(port, timeout=5)
    try:
        assert c.request("initialize", {"adapterID": "dynstep"})["supportsConfigurationDoneRequest"]
        assert c.invalid == []
    finally:
        c.close()


CLOSING = [
    b"Content-Length: 5\r\n\r\n{}{}{",                             # not JSON
    b"Content-Length: 2\r\n\r\n[]",                                # not an object
    b"Content-Length: 4\r\n\r\nnull",
    b"Content-Length: 3\r\n\r\n\xff\xfe\x00",                      # not UTF-8
    frame({"type": "request", "command": "initialize"}),           # no seq
    frame({"seq": "1", "type": "request", "command": "initialize"}),
    frame({"seq": -1, "type": "request", "command": "initialize"}),
    b"Content-Type: x\r\n\r\n{}",                                  # no Content-Length
    b"Content-Length: -3\r\n\r\n{}",
    b"Content-Length: 12abc\r\n\r\n{}",
    b"Content-Length: 99999999999999\r\n\r\n",                     # over the limit
    b"Content-Length: 20000000\r\n\r\n",
    b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",           # conflicting
    b"X" * 9000 + b"\r\n\r\n",                                     # header too long
    "Content-Länge: 2\r\n\r\n{}".encode(),                         # not ASCII
    b"garbage without a colon\r\n\r\n",
]


@pytest.mark.parametrize("data", CLOSING, ids=range(len(CLOSING)))
def test_malformed_frames_close_the_connection(server, data):
    received, closed = raw_exchange(server.port, data, wait=3.0, until_closed=True)
    assert closed
    if received:    # answered first (a frame too long to read may be reset before the answer arrives)
        assert received[0]["type"] == "response" and received[0]["success"] is False
        assert "closing the connection" in received[0]["message"]
    alive(server.port)


@pytest.mark.parametrize("data", [b"Content-Length: 50\r\n\r\n{\"seq\": 1", b"Content-Len"])
def test_a_client_stalling_or_leaving_mid_frame_is_dropped(server, data):
    received, closed = raw_exchange(server.port, data, wait=FRAME_TIMEOUT * 8, until_closed=True)
    answers = [m for m in received if m["type"] == "response"]
    assert closed and all(not m["success"] and "cannot be read" in m["message"] for m in answers)
    raw_exchange(server.port, data, close_after=True)
    alive(server.port)


ANSWERED = [
    ({"seq": 1, "type": "event", "event": "x"}, "not a DAP request"),
    ({"seq": 1, "type": "request"}, "not a DAP request"),
    ({"seq": 1, "type": "request", "command": "initialize", "arguments": [1]}, "arguments must be an object"),
    ({"seq": 1, "type": "request", "command": "frobnicate"}, "unsupported request 'frobnicate'"),
    ({"seq": 1, "type": "request", "command": "__class__"}, "unsupported request"),
    ({"seq": 1, "type": "request", "command": "stackTrace", "arguments": {"threadId": 1}}, "initialize first"),
    ({"seq": 1, "type": "request", "command": "configurationDone"}, "initialize first"),
]


@pytest.mark.parametrize("msg,message", ANSWERED, ids=[m for _, m in ANSWERED])
def test_malformed_requests_get_an_error_response(server, msg, message):
    received, closed = raw_exchange(server.port, frame(msg))
    assert not closed and received[0]["success"] is False and message in received[0]["message"]


def test_out_of_order_and_stale_requests_are_errors(server):
    c = Client(server.port, timeout=5)
    c.request("initialize", {"adapterID": "dynstep"})
    for command, args, message in [("initialize", {"adapterID": "x"}, "already"), ("configurationDone", {}, "attach first"),
                                   ("launch", {}, "use an attach configuration")]:
        r = c.response(command, args)
        assert not r["success"] and message in r["message"]
    c.request("attach", {})
    c.wait_event("initialized")
    r = c.response("variables", {"variablesReference": 12345})
    assert not r["success"] and "not stopped" in r["message"]
    assert not c.response("source", {"source": {"sourceReference": 99}, "sourceReference": 99})["success"]
    assert not c.response("attach", {})["success"]
    both = frame({"seq": 7, "type": "request", "command": "threads"}) * 2    # two frames in one write
    c.sock.sendall(both)
    assert c.invalid == []
    c.close()


def test_second_client_is_refused_while_one_is_attached(server):
    first = Client(server.port, timeout=5)
    first.attach()
    received, closed = raw_exchange(server.port, frame({"seq": 1, "type": "request", "command": "initialize"}),
                                    wait=4)
    assert closed and "another debug client is attached" in received[0]["body"]["output"]
    assert first.request("threads")["threads"]
    first.close()
    time.sleep(0.2)
    alive(server.port)                                    # once it left, the next one is welcome


def test_loopback_by_default_and_a_token_off_loopback():
    srv = DapServer(port=0)
    assert srv.host == "127.0.0.1"
    srv.close()
    with pytest.raises(ValueError, match="needs a token"):
        DapServer("0.0.0.0", 0)
    srv = DapServer("0.0.0.0", 0, token="s3cret")
    try:
        for given in (None, "wrong"):
            c = Client(srv.port, timeout=5)
            c.request("initialize", {"adapterID": "dynstep"})
            r = c.response("attach", {} if given is None else {"token": given})
            assert not r["success"] and "token" in r["message"]
            assert c.closed.wait(5)
        c = Client(srv.port, timeout=5)
        c.request("initialize", {"adapterID": "dynstep"})
        c.request("attach", {"token": "s3cret"})
        c.wait_event("initialized")
        assert c.invalid == []
        c.close()
    finally:
        srv.close()


def _mutations(rng: random.Random) -> list[bytes]:
    valid = [{"seq": rng.randint(1, 9), "type": "request", "command": c, "arguments": a} for c, a in [
        ("initialize", {"adapterID": "x"}), ("attach", {}), ("threads", {}), ("setBreakpoints", {"source": {"path": "m.py"},
         "breakpoints": [{"line": 3}]}), ("setFunctionBreakpoints", {"breakpoints": [{"name": "op:relu"}]}),
        ("variables", {"variablesReference": 7}), ("evaluate", {"expression": "1+1"}), ("pause", {"threadId": 1}),
        ("stackTrace", {"threadId": 1}), ("source", {"sourceReference": 1}), ("continue", {"threadId": 1})]]
    msg = rng.choice(valid)
    body = json.dumps(msg).encode()
    choice = rng.randrange(9)
    if choice == 0:
        return [frame(msg)]
    if choice == 1:                                       # flip bytes in the body
        b = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return [b"Content-Length: %d\r\n\r\n" % len(b) + bytes(b)]
    if choice == 2:                                       # a wrong length
        return [b"Content-Length: %d\r\n\r\n" % max(0, len(body) + rng.randint(-5, 5)) + body]
    if choice == 3:                                       # random junk
        return [bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))]
    if choice == 4:                                       # fields of the wrong type
        key = rng.choice(["seq", "type", "command", "arguments"])
        return [frame({**msg, key: rng.choice([None, 3.5, [], {}, "x", -1, True])})]
    if choice == 5:                                       # arguments of the wrong shape
        args = {k: rng.choice([None, "x", -7, [1], {"a": 1}, 10**30]) for k in (msg.get("arguments") or {"a": 0})}
        return [frame({**msg, "arguments": args})]
    if choice == 6:                                       # one frame split in many writes
        data = frame(msg)
        cut = sorted(rng.sample(range(1, len(data)), 2))
        return [data[:cut[0]], data[cut[0]:cut[1]], data[cut[1]:]]
    if choice == 7:                                       # cut short: the client leaves mid-message
        data = frame(msg)
        return [data[:rng.randrange(1, len(data))]]
    return [frame({**msg, "command": rng.choice(["frobnicate", "", "x" * 300, "__init__", "stepBack"])})]


def test_fuzz_never_hangs_the_program_nor_loses_records(server):
    """300 seeded malformed messages while a compiled function with probes runs on another thread:
    every answer is a schema-valid message (an error response, or the connection closed), the
    program keeps running, and every probe hit is recorded."""
    fn = torch.compile(lambda x: torch.relu(x) * 2, backend=dynstep.superstep(
        inner="eager", probe=["op:relu"], actions=["record"], record=MAX_CALLS))
    fuzzing, calls = threading.Event(), [0]
    fuzzing.set()
    with dynstep.session() as session:
        fn(torch.randn(8))                                # compiled before the fuzzing starts
        calls[0] += 1

        def program():
            while (fuzzing.is_set() and calls[0] < MAX_CALLS) or calls[0] < 50:
                fn(torch.randn(8))
                calls[0] += 1
                time.sleep(0.0005)   # a program that also does other things: the fuzzer gets the GIL too

        worker = threading.Thread(target=program)
        worker.start()
        sent, answers = _fuzz(server.port, random.Random(15))
        fuzzing.clear()
        worker.join(60)
    assert sent >= 300 and not worker.is_alive()
    assert answers and all(not m.get("success", True) or m["command"] in _VALID for m in answers)
    assert len(session.records("op:relu")) == calls[0] >= 50
    alive(server.port)


MAX_CALLS = 20_000
_VALID = {"initialize", "attach", "threads", "setBreakpoints", "setFunctionBreakpoints", "pause"}


def _fuzz(port: int, rng: random.Random) -> tuple[int, list[dict]]:
    sent, answers = 0, []
    for _ in range(110):                                  # 110 connections, up to 3 messages each
        sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        try:
            for _ in range(3):
                sent += 1
                for piece in _mutations(rng):
                    sock.sendall(piece)
            answers += _drain(sock)
        except OSError:
            pass                                          # the server closed it: that is allowed
        finally:
            sock.close()
    return sent, answers


def _drain(sock: socket.socket) -> list[dict]:
    """What the server said (schema-validated) until it closed or went quiet."""
    sock.settimeout(0.05)
    buf = b""
    try:
        while chunk := sock.recv(65536):
            buf += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return [m for m in _messages(buf) if m["type"] == "response"]
