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
    deadline = time.monotonic() + 60
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        m = re.search(r"debug adapter listening on [\d.]+:(\d+)", line)
        if m:
            drain(proc, seen)
            return proc, int(m.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("the program did not start its DAP server:\n" + "".join(seen))


def drain(proc: subprocess.Popen, lines: list[str]) -> None:
    """Keep reading the program's stderr (a full pipe would block it); `proc.err()` is all of it so far."""
    thread = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    thread.start()

    def err(timeout: float = 60) -> str:
        thread.join(timeout)
        return "".join(lines)

    proc.err = err   # type: ignore[attr-defined]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
