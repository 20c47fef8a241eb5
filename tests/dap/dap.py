"""Test helpers for the DAP server: schema validation, a validating client, a debuggee under `dynstep run --dap`.

Every message a test receives from the server (and every request it sends through `Client`) is
checked against the protocol's JSON schema (schema/, a copy of the official one).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema

from dynstep.dap.client import DapClient

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL = str(HERE / "block_model.py")
SCHEMA = json.loads((HERE / "schema" / "debugAdapterProtocol.json").read_text())
_validators: dict[str, jsonschema.Draft4Validator] = {}


def definition(msg: dict) -> str:
    """The schema definition a message must satisfy: StoppedEvent, StackTraceResponse, ErrorResponse, ..."""
    kind = msg.get("type")
    if kind == "event":
        name = msg["event"][:1].upper() + msg["event"][1:] + "Event"
    elif kind == "response":
        ok = msg.get("success") and msg.get("command")
        name = msg["command"][:1].upper() + msg["command"][1:] + "Response" if ok else "ErrorResponse"
    else:
        name = str(msg.get("command", ""))[:1].upper() + str(msg.get("command", ""))[1:] + "Request"
    if name not in SCHEMA["definitions"]:
        name = {"event": "Event", "response": "Response"}.get(kind, "Request")
    return name


def validate(msg: dict) -> None:
    """Against the schema. One relaxation: a response's request_seq may be 0. It answers a request a
    client numbered 0 (nvim-dap before Dec 2023; the schema had no minimum until Jan 2026) or a message
    with no readable seq (an error response naming no request); everything else in it is checked."""
    if msg.get("type") == "response" and msg.get("request_seq") == 0:
        msg = {**msg, "request_seq": 1}
    name = definition(msg)
    v = _validators.get(name)
    if v is None:
        v = _validators[name] = jsonschema.Draft4Validator({"$ref": f"#/definitions/{name}",
                                                            "definitions": SCHEMA["definitions"]})
    v.validate(msg)


class Client(DapClient):
    """A DapClient whose every received message is validated; `invalid` lists the failures."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 60.0) -> None:
        self.invalid: list[str] = []
        self.received: list[dict] = []
        super().__init__(host, port, timeout=timeout, on_message=self._check)

    def _check(self, msg: dict) -> None:
        self.received.append(msg)
        try:
            validate(msg)
        except jsonschema.ValidationError as exc:
            self.invalid.append(f"{definition(msg)}: {exc.message} in {json.dumps(msg)[:300]}")

    def send(self, command: str, arguments: dict | None = None):
        request = {"seq": 1, "type": "request", "command": command, **({"arguments": arguments} if arguments is not None else {})}
        validate(request)
        return super().send(command, arguments)

    def attach(self, **args) -> dict:
        self.request("initialize", {"adapterID": "dynstep", "linesStartAt1": True, "columnsStartAt1": True})
        body = self.request("attach", args)
        self.wait_event("initialized")
        return body


def env() -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "NO_COLOR": "1",
           "TERM": "dumb", "PYTHONUNBUFFERED": "1"}
    for key in [k for k in out if k.startswith("DYNSTEP_")]:
        del out[key]
    return out


def start_program(*args: str, extra_env: dict[str, str] | None = None, cwd: str | None = None, address: str = "0",
                  launcher: list[str] | None = None) -> tuple[subprocess.Popen, int]:
    """`dynstep run --dap ADDRESS ARGS...` (`python -m dynstep`, or the given launcher, e.g. the console
    script); (process, the port it listens on)."""
    command = [*(launcher or [sys.executable, "-m", "dynstep"]), "run", "--dap", address, *args]
    proc = subprocess.Popen(command, cwd=cwd or str(ROOT),
                            env={**env(), **(extra_env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    return proc, listening_port(proc, 60, "the program did not start its DAP server")


LISTENING = re.compile(r"debug adapter listening on [\d.]+:(\d+)")


def listening_port(proc: subprocess.Popen, seconds: float, failure: str) -> int:
    """The port in the program's first `debug adapter listening on HOST:PORT` line on stderr, read by
    `drain` (a silent program is not waited on for longer than `seconds`); AssertionError with `failure`
    and what it printed, the program killed, when none comes."""
    seen: list[str] = []
    changed = drain(proc, seen)
    deadline = time.monotonic() + seconds
    with changed:
        while True:
            m = next((m for m in map(LISTENING.search, seen) if m), None)
            if m or time.monotonic() >= deadline or proc.err_done():   # type: ignore[attr-defined]
                break
            changed.wait(min(1.0, max(0.0, deadline - time.monotonic())))
    if m is None:
        m = next((m for m in map(LISTENING.search, seen) if m), None)
    if m:
        return int(m.group(1))
    proc.kill()
    raise AssertionError(f"{failure} (waited {seconds:.0f} s):\n" + proc.err(10))   # type: ignore[attr-defined]


def drain(proc: subprocess.Popen, lines: list[str]) -> threading.Condition:
    """Keep reading the program's stderr into `lines` (a full pipe would block it); `proc.err()` is all of it
    so far, `proc.err_done()` whether the pipe has closed; the returned condition is notified at each line."""
    changed = threading.Condition()

    def read() -> None:
        for line in proc.stderr:
            with changed:
                lines.append(line)
                changed.notify_all()
        with changed:
            changed.notify_all()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()

    def err(timeout: float = 60) -> str:
        thread.join(timeout)
        with changed:
            return "".join(lines)

    proc.err = err   # type: ignore[attr-defined]
    proc.err_done = lambda: not thread.is_alive()   # type: ignore[attr-defined]
    return changed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
