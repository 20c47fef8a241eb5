"""`dynstep attach HOST:PORT`: the terminal REPL, driving a process served with `dynstep run --dap`.

It is a DAP client of the same server VS Code attaches to (`dynstep.dap.client`), so one
protocol serves both. At a stop it shows what the local REPL shows and takes the same commands:

    c / continue     continue            s / step     the next node (DAP next)
    n / next         into the next graph (DAP stepIn)    out    the next graph call (DAP stepOut)
    p EXPR           evaluate in the stopped environment (value, the node's inputs, your names)
    watch EXPR       shown at every stop                  q / quit    end the program (DAP terminate)
    detach / Ctrl-D  leave; the program runs on           anything else (set, w, g, b, cl, record,
                                                          help) runs in the remote stepper
While the program runs, Ctrl-C pauses it at the next node (DAP pause).
"""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import threading
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.text import Text

from ..core.command_table import NODE_STOP
from ..dap.api import parse_address
from ..dap.client import ClientError, DapClient

PROMPT = "(dynstep) "
_console = Console(stderr=True, highlight=False, soft_wrap=True)


def attach(address: str, *, token: str | None = None) -> tuple[bool, str, int]:
    """Attach, configure, and drive the program until it exits or the user detaches."""
    try:
        host, port = parse_address(address)
    except ValueError as exc:
        return False, f"dynstep attach: {exc}", 2
    try:
        client = DapClient("127.0.0.1" if host == "localhost" else host, port)
    except OSError as exc:
        return False, f"dynstep attach: cannot connect to {host}:{port} ({exc}); is `dynstep run --dap {port}` running?", 1
    session = AttachSession(client, _console)
    try:
        with _ctrl_c_pauses():
            return session.start(token)
    except ClientError as exc:
        return False, f"dynstep attach: {exc}", 1
    finally:
        client.close()


@contextlib.contextmanager
def _ctrl_c_pauses() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt here (a pause request, or `quit` at the prompt) even when this
    process was started with SIGINT ignored, as a background job of a script is; restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class AttachSession:
    def __init__(self, client: DapClient, console: Console) -> None:
        self.client, self.console = client, console
        self.watches: list[str] = []
        self.thread_id = 1
        self.frame_id: int | None = None

    def start(self, token: str | None) -> tuple[bool, str, int]:
        c = self.client
        c.request("initialize", {"adapterID": "dynstep", "clientID": "dynstep-attach", "linesStartAt1": True,
                                 "columnsStartAt1": True, "pathFormat": "path"})
        c.request("attach", {"token": token} if token else {})
        c.wait_event("initialized")
        c.request("configurationDone")
        self.console.print(Text("dynstep attach: attached; the program runs (Ctrl-C pauses it)", style="dim"))
        return self.loop()

    def loop(self) -> tuple[bool, str, int]:
        while True:
            try:
                event = self._next_event()
            except KeyboardInterrupt:
                self.client.send("pause", {"threadId": self.thread_id})
                continue
            if event is None:
                return False, "dynstep attach: the connection closed", 1
            name, body = event.get("event"), event.get("body") or {}
            if name == "output":
                self._output(body)
            elif name == "exited":
                self.console.print(Text(f"dynstep attach: the program exited with code {body.get('exitCode')}"))
                self._leave()
                return True, "", 0
            elif name == "terminated":
                return True, "", 0
            elif name == "stopped":
                self.thread_id = body.get("threadId", self.thread_id)
                if not self.at_stop(body):
                    self._leave()
                    return True, "dynstep attach: detached; the program runs on", 0

    def _next_event(self) -> dict[str, Any] | None:
        """The next event, waking every 0.2 s: the kernel may hand Ctrl-C's SIGINT to another thread,
        and Python runs the handler only when the main thread wakes (a blocked wait would hold it
        until the program's next event, which a program running without output never sends)."""
        while True:
            try:
                return self.client.events.get(timeout=0.2)
            except queue.Empty:
                continue

    def at_stop(self, body: dict[str, Any]) -> bool:
        """Show the stop and read commands until one resumes (True) or the user leaves (False)."""
        self.show_stop(body)
        rank = re.match(r"(rank \d+): ", str(body.get("description", "")))   # a job's adapter names the rank
        prompt = f"[{rank.group(1)}] {PROMPT}" if rank else PROMPT
        while True:
            try:
                line = input(prompt).strip()
            except EOFError:
                return False
            except KeyboardInterrupt:
                self.console.print()
                line = "quit"
            self._flush_output()
            if not line:
                continue
            word, _, arg = line.partition(" ")
            request = NODE_STOP.request_for(word)   # s -> next, n -> stepIn, ... (core/command_table.py)
            if request is not None:
                self.client.request(request, {"threadId": self.thread_id})
                return True
            if NODE_STOP.name_of(word) == "quit":
                self.client.request("terminate")
                return True
            if word == "detach":
                return False
            self.command(word, arg.strip(), line)

    def command(self, word: str, arg: str, line: str) -> None:
        if word == "watch" and arg:
            self.watches.append(arg)
            self._show_value(arg)
            return
        expr = arg if word in ("p", "print") else line
        try:
            result = self.client.request("evaluate", {"expression": expr, "frameId": self.frame_id,
                                                      "context": "repl"})
        except ClientError as exc:
            self.console.print(Text(f"error: {line}: {exc}", style="red"))
            return
        text = result.get("result", "")
        self.console.print(Text(f"{expr} = ", style="bold") + Text(text) if word in ("p", "print") else Text(text))

    def show_stop(self, body: dict[str, Any]) -> None:
        frames = self.client.request("stackTrace", {"threadId": self.thread_id})["stackFrames"]
        self.frame_id = frames[0]["id"] if frames else None
        label = {"breakpoint": "breakpoint", "step": "step", "pause": "paused", "exception": "non-finite"}
        self.console.print(Text(f"── {label.get(body.get('reason'), body.get('reason'))} · "
                                f"{body.get('description', '')}", style="bold cyan"))
        user = next((f for f in frames if f.get("source", {}).get("path")), None)
        if user is not None:
            self.console.print(Text(f"   {user['source']['name']}:{user['line']}   {user['name']}", style="dim"))
        if body.get("text"):
            self.console.print(Text("   " + body["text"], style="red"))
        self._show_value("value", indent=True)
        for expr in self.watches:
            self._show_value(expr, prefix="watch ")
        self._flush_output()

    def _show_value(self, expr: str, indent: bool = False, prefix: str = "") -> None:
        try:
            result = self.client.request("evaluate", {"expression": expr, "frameId": self.frame_id, "context": "watch"})
            text = result.get("result", "")
        except ClientError as exc:
            text = f"<{exc}>"
        self.console.print(Text(f"   {text}") if indent else Text(f"   {prefix}{expr} = {text}", style="magenta"))

    def _output(self, body: dict[str, Any]) -> None:
        style = "yellow" if body.get("category") == "important" else "dim"
        self.console.print(Text(str(body.get("output", "")).rstrip("\n"), style=style))

    def _flush_output(self) -> None:
        """Output events that came while the prompt waited (logpoints, command answers)."""
        kept = []
        while not self.client.events.empty():
            event = self.client.events.get_nowait()
            if event is not None and event.get("event") == "output":
                self._output(event.get("body") or {})
            else:
                kept.append(event)
        for event in kept:
            self.client.events.put(event)

    def _leave(self) -> None:
        try:
            self.client.request("disconnect", {"terminateDebuggee": False}, timeout=5)
        except ClientError:
            pass   # the program already closed the connection

