"""A whole DAP session driven by a second, independent client: debugpy's DAP message channel.

`debugpy.common.messaging.JsonMessageChannel` (PyPI `debugpy`, a dev dependency) is the DAP client
debugpy's own adapter runs against pydevd: its framing, `seq` numbering, request/response matching,
error responses and event dispatch are Microsoft's debugpy team's, not this project's and not the
Node `DebugClient`'s (tests/dap_node/). The session is what an editor does: attach, a breakpoint on a
model line, threads, stack, scopes, variables, evaluate as hover, repl and watch, setVariable (the
change reaches the program's output), step, continue, loadedSources, the program's end, disconnect.

Other candidates were checked (issue 26, item 14): `dap-python` 0.5.0 (PyPI) parses every response
into its pydantic models, but its models for acknowledgement responses (attach, configurationDone,
next, disconnect) require fields a response body never has, so it cannot finish an attach with any
adapter; nvim-dap is on no registry CI reaches (tests/dap/test_nvim_dap_replay.py replays its
messages instead); `dap-mcp` only launches adapters over stdio (dynstep is attached to).
"""

from __future__ import annotations

import queue
import socket
import time

import torch

from .dap import MODEL, start_program, validate
from .test_sequence import ATTN_LINE, _eager_with_zeroed_attn

messaging = __import__("debugpy.common.messaging", fromlist=["messaging"])
djson = __import__("debugpy.common.json", fromlist=["json"])


class Events:
    """The channel's handler object: every event into a queue (validated against the schema)."""

    def __init__(self) -> None:
        self.queue: queue.Queue = queue.Queue()

    def event(self, event) -> None:
        msg = {"seq": event.seq, "type": "event", "event": event.event}
        if event.body:
            msg["body"] = dict(event.body)
        validate(msg)
        self.queue.put(msg)

    def disconnect(self) -> None:
        self.queue.put(None)


def ask(channel, command: str, arguments: dict | None = None, timeout: float = 60.0):
    """A request through the channel; its body (a MessageDict), or the channel's exception for an error
    response. Bounded: debugpy's own wait has no timeout."""
    request = channel.send_request(command, arguments)
    deadline = time.monotonic() + timeout
    while request.response is None:
        assert time.monotonic() < deadline, f"no response to {command} within {timeout} s"
        time.sleep(0.01)
    return request.wait_for_response()


def until(events: Events, name: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        msg = events.queue.get(timeout=max(0.1, deadline - time.monotonic()))
        assert msg is not None, f"the connection closed while waiting for {name}"
        if msg["event"] == name:
            return msg


def test_a_second_independent_client_drives_a_whole_session(tmp_path):
    out = tmp_path / "out.safetensors"
    proc, port = start_program("--wait", "--inner", "eager", MODEL, "3", extra_env={"DYNSTEP_TEST_OUT": str(out)})
    events = Events()
    stream = messaging.JsonIOStream.from_socket(socket.create_connection(("127.0.0.1", port), timeout=60), "dynstep")
    channel = messaging.JsonMessageChannel(stream, events, name="debugpy-client")
    channel.start()
    try:
        caps = ask(channel, "initialize", {"clientID": "debugpy-messaging", "adapterID": "dynstep", "linesStartAt1": True,
                                           "columnsStartAt1": True, "pathFormat": "path", "supportsVariablePaging": True})
        assert caps("supportsLoadedSourcesRequest", bool) and caps("supportsSetVariable", bool)
        ask(channel, "attach", {"name": "dynstep", "type": "dynstep", "request": "attach"})
        until(events, "initialized")
        bps = ask(channel, "setBreakpoints", {"source": {"path": MODEL}, "breakpoints": [{"line": ATTN_LINE}]})
        assert len(bps("breakpoints", djson.array())) == 1
        ask(channel, "setExceptionBreakpoints", {"filters": ["nan"]})
        ask(channel, "configurationDone")
        stopped = until(events, "stopped", timeout=240)["body"]
        assert stopped["reason"] == "breakpoint"
        tid = stopped["threadId"]
        assert [t["id"] for t in ask(channel, "threads")("threads", djson.array())] == [tid]
        frames = ask(channel, "stackTrace", {"threadId": tid, "startFrame": 0, "levels": 20})("stackFrames", djson.array())
        graph, user = frames[0], frames[1]
        assert user["source"]["path"] == MODEL and user["line"] == ATTN_LINE and frames[-1]["name"] == "<module>"
        listing = ask(channel, "source", {"source": graph["source"], "sourceReference": graph["source"]["sourceReference"]})
        assert "attn = torch.nn.functional.linear" in listing("content", str)
        node = ask(channel, "scopes", {"frameId": graph["id"]})("scopes", djson.array())[0]["variablesReference"]
        value = next(v for v in ask(channel, "variables", {"variablesReference": node})("variables", djson.array())
                     if v["name"] == "value")
        rows = ask(channel, "variables", {"variablesReference": value["variablesReference"], "filter": "indexed",
                                          "start": 0, "count": 2})("variables", djson.array())
        assert [r["name"] for r in rows] == ["[0]", "[1]"]
        hover = ask(channel, "evaluate", {"expression": "attn", "frameId": user["id"], "context": "hover"})
        assert hover("result", str) == value["value"]
        repl = ask(channel, "evaluate", {"expression": "value.shape", "frameId": graph["id"], "context": "repl"})
        assert repl("result", str) == "torch.Size([2, 8, 16])"
        watch = ask(channel, "evaluate", {"expression": "x.shape", "frameId": user["id"], "context": "watch"})
        assert watch("result", str) == "torch.Size([2, 8, 16])"          # forward's own x, a real local
        try:
            ask(channel, "evaluate", {"expression": "q.sum()", "frameId": user["id"], "context": "watch"})
            raise AssertionError("q is not kept at this stop")
        except messaging.MessageHandlingError as exc:
            assert "not available in this frame" in str(exc)
        done = ask(channel, "setVariable", {"variablesReference": node, "name": "value", "value": "value * 0"})
        assert "max 0" in done("value", str)
        ask(channel, "next", {"threadId": tid})
        assert until(events, "stopped")["body"]["reason"] == "step"
        sources = ask(channel, "loadedSources")("sources", djson.array())
        assert MODEL in [s.get("path") for s in sources]
        ask(channel, "continue", {"threadId": tid})
        assert until(events, "stopped")["body"]["reason"] == "breakpoint"             # the second call
        ask(channel, "setBreakpoints", {"source": {"path": MODEL}, "breakpoints": []})
        ask(channel, "continue", {"threadId": tid})
        assert until(events, "exited")["body"]["exitCode"] == 3
        until(events, "terminated")
        ask(channel, "disconnect", {})
        assert proc.wait(60) == 3
    finally:
        channel.close()
        if proc.poll() is None:
            proc.kill()
    from safetensors.torch import load_file

    got = load_file(str(out))
    _, plain, changed = _eager_with_zeroed_attn()
    torch.testing.assert_close(got["first"], changed, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got["second"], plain, rtol=1e-4, atol=1e-4)
