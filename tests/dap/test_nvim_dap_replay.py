"""nvim-dap's exact message sequence, replayed against `dynstep run --dap` (issue 26, items 10 and 14).

nvim-dap (github.com/mfussenegger/nvim-dap) is on no registry CI reaches (not PyPI, npm or Debian;
Debian's neovim 0.7.2 has no nvim-dap package) and is GPL-3.0, so it is neither run nor copied here:
this client sends what its source shows nvim-dap 0.7.0 sends (tag 0.7.0, commit
9d81c11fd185a131f81841e64941859305f6c42d, Nov 2023, for Neovim 0.8/0.9), from lua/dap/session.lua,
lua/dap.lua, lua/dap/repl.lua, lua/dap/ui/widgets.lua and lua/dap/entity.lua at that tag:

- `seq` starts at 0 (`new_session`: seq = 0; 1 only from commit 62b0bea, Dec 2023) and counts up;
  a response is matched by `request_seq` (`handle_body`: message_callbacks[request_seq]).
- `Session:initialize`: `initialize` with clientId/clientname "neovim", adapterID, pathFormat,
  linesStartAt1, columnsStartAt1, supportsRunInTerminalRequest, supportsVariableType,
  supportsProgressReporting, supportsStartDebuggingRequest, locale (no supportsVariablePaging); on its
  response the configuration's request (`attach`, the whole configuration as arguments).
- `event_initialized`: `setBreakpoints` per buffer ({source: {path, name}, sourceModified: false,
  breakpoints: [{line}], lines}), then `setExceptionBreakpoints` with the filters marked default, then
  `configurationDone` without arguments.
- `event_stopped`: `threads` for a thread it does not know, `stackTrace {threadId}`, the first frame with
  a source is jumped to (`source {source, sourceReference}` for a frame without a path), then
  `scopes {frameId}` and `variables {variablesReference}` for every scope that is not expensive.
- `dap.up()`: the next frame, its scopes and variables; hover and the REPL: `evaluate {expression,
  context: "repl", frameId}` (0.7.0 has no watch expressions); the variables widget's set:
  `setVariable {variablesReference: parent, name, value}`, then scopes and variables again; step over
  and continue: `next`/`continue {threadId, granularity: "statement"}`; `dap.disconnect()`:
  `disconnect {restart: false}`, then the socket is closed.
"""

from __future__ import annotations

import json
import queue
import socket
import threading

import torch

from dynstep.dap.protocol import FrameReader

from .dap import MODEL, start_program, validate
from .test_sequence import ATTN_LINE, _eager_with_zeroed_attn



class NvimDap:
    """nvim-dap 0.7.0's side of the wire: its seq numbering and its requests, nothing of dynstep's client."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=240)
        self.seq = 0                                   # session.lua 0.7.0: seq = 0
        self.responses: dict[int, queue.Queue] = {}
        self.events: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.invalid: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        reader = FrameReader(self.sock, frame_timeout=60)
        try:
            while (body := reader.read()) is not None:
                msg = json.loads(body)
                try:
                    validate(msg)
                except Exception as exc:   # noqa: BLE001 - collected, asserted empty by the test
                    self.invalid.append(f"{exc}: {msg}")
                if msg.get("type") == "response":
                    self.responses[msg["request_seq"]].put(msg)
                else:
                    self.events.put(msg)
        except OSError:
            pass
        self.events.put(None)

    def send(self, command: str, arguments: dict | None = None) -> queue.Queue:
        """Session:request: payload {seq, type, command, arguments} (arguments absent when nil)."""
        with self.lock:
            seq, self.seq = self.seq, self.seq + 1
            payload = {"seq": seq, "type": "request", "command": command}
            if arguments is not None:
                payload["arguments"] = arguments
            self.responses[seq] = answer = queue.Queue()
            body = json.dumps(payload).encode()
            self.sock.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        answer.seq = seq   # type: ignore[attr-defined]
        return answer

    def request(self, command: str, arguments: dict | None = None) -> dict:
        answer = self.send(command, arguments)
        msg = answer.get(timeout=120)
        assert msg["request_seq"] == answer.seq, msg   # type: ignore[attr-defined]
        return msg

    def event(self, name: str, timeout: float = 240) -> dict:
        while True:
            msg = self.events.get(timeout=timeout)
            assert msg is not None, f"connection closed while waiting for {name}"
            if msg["event"] == name:
                return msg

    # -- what nvim-dap does on its events and for its user commands --------------------------------------

    def initialize(self, port: int) -> dict:
        caps = self.request("initialize", {
            "clientId": "neovim", "clientname": "neovim", "adapterID": "nvim-dap", "pathFormat": "path",
            "columnsStartAt1": True, "linesStartAt1": True, "supportsRunInTerminalRequest": True,
            "supportsVariableType": True, "supportsProgressReporting": True, "supportsStartDebuggingRequest": True,
            "locale": "en_US"})
        assert caps["request_seq"] == 0 and caps["success"], caps       # the first request is numbered 0
        self.capabilities = caps["body"]
        self.attach = self.send("attach", {"type": "dynstep", "request": "attach", "name": "Attach to dynstep",
                                           "host": "127.0.0.1", "port": port})
        return caps

    def on_initialized(self, breakpoints: dict[str, list[int]]) -> None:
        self.event("initialized")
        waiting = [self.send("setBreakpoints", {"source": {"path": path, "name": path.rsplit("/", 1)[-1]},
                                                "sourceModified": False, "breakpoints": [{"line": n} for n in lines],
                                                "lines": lines})
                   for path, lines in breakpoints.items()]
        for answer in waiting:
            assert answer.get(timeout=60)["success"]
        filters = [f["filter"] for f in self.capabilities.get("exceptionBreakpointFilters", []) if f.get("default")]
        assert self.request("setExceptionBreakpoints", {"filters": filters})["success"]
        assert self.request("configurationDone")["success"]
        assert self.attach.get(timeout=60)["success"]

    def on_stopped(self, known_threads: set[int]) -> tuple[dict, list[dict], dict]:
        stopped = self.event("stopped")["body"]
        if stopped["threadId"] not in known_threads:
            threads = self.request("threads")["body"]["threads"]
            known_threads.update(t["id"] for t in threads)
        frames = self.request("stackTrace", {"threadId": stopped["threadId"]})["body"]["stackFrames"]
        top = next(f for f in frames if f.get("source"))
        source = top["source"]
        if source.get("sourceReference"):
            content = self.request("source", {"source": source, "sourceReference": source["sourceReference"]})
            assert content["success"] and content["body"]["content"]
        return stopped, frames, self.scopes(top)

    def scopes(self, frame: dict) -> dict:
        """_request_scopes: scopes, then variables of every scope that is not expensive (sent together)."""
        scopes = self.request("scopes", {"frameId": frame["id"]})["body"]["scopes"]
        waiting = [(s, self.send("variables", {"variablesReference": s["variablesReference"]}))
                   for s in scopes if not s["expensive"]]
        return {s["name"]: {v["name"]: v for v in answer.get(timeout=60)["body"]["variables"]} | {
            "__ref__": s["variablesReference"]} for s, answer in waiting}

    def evaluate(self, expression: str, frame: dict) -> dict:
        return self.request("evaluate", {"expression": expression, "context": "repl", "frameId": frame["id"]})


def test_nvim_dap_0_7_0_runs_a_session_numbering_from_0(tmp_path):
    out = tmp_path / "out.safetensors"
    proc, port = start_program("--wait", "--inner", "eager", MODEL, "3", extra_env={"DYNSTEP_TEST_OUT": str(out)})
    nvim = NvimDap(port)
    try:
        nvim.initialize(port)
        nvim.on_initialized({MODEL: [ATTN_LINE]})
        known: set[int] = set()
        stopped, frames, scopes = nvim.on_stopped(known)
        assert stopped["reason"] == "breakpoint" and frames[0]["source"]["sourceReference"]
        assert "value" in scopes["Node"]
        user = frames[1]                                               # dap.up()
        assert user["source"]["path"] == MODEL and user["line"] == ATTN_LINE
        scopes = nvim.scopes(user)
        hover = nvim.evaluate("attn", user)                            # widgets.hover: context "repl" in 0.7.0
        assert hover["success"] and hover["body"]["result"] == scopes["Node"]["value"]["value"]
        shape = nvim.evaluate("x.shape", user)                         # the REPL, in forward's frame
        assert shape["body"]["result"] == "torch.Size([2, 8, 16])"
        rows = nvim.request("variables", {"variablesReference": scopes["Node"]["value"]["variablesReference"]})
        assert [v["name"] for v in rows["body"]["variables"]][:6] == ["shape", "dtype", "device", "stats", "[0]", "[1]"]
        changed = nvim.request("setVariable", {"variablesReference": scopes["Node"]["__ref__"], "name": "value",
                                               "value": "value * 0"})
        assert changed["success"] and "max 0" in changed["body"]["value"]
        nvim.scopes(user)                                              # entity.set_variable refreshes the scopes
        assert nvim.request("next", {"threadId": stopped["threadId"], "granularity": "statement"})["success"]
        assert nvim.on_stopped(known)[0]["reason"] == "step"
        assert nvim.request("continue", {"threadId": stopped["threadId"], "granularity": "statement"})["success"]
        assert nvim.on_stopped(known)[0]["reason"] == "breakpoint"      # the second call
        assert nvim.request("disconnect", {"restart": False})["success"]
        nvim.sock.close()                                              # Session:close
        assert proc.wait(120) == 3                                     # the program ran on to its end
        assert nvim.invalid == [], nvim.invalid
    finally:
        nvim.sock.close()
        if proc.poll() is None:
            proc.kill()
    from safetensors.torch import load_file

    got = load_file(str(out))
    _, plain, changed = _eager_with_zeroed_attn()
    torch.testing.assert_close(got["first"], changed, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got["second"], plain, rtol=1e-4, atol=1e-4)
