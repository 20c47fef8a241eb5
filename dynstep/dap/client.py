"""A small DAP client: one socket, a reader thread, requests matched to responses by seq.

Used by `dynstep attach` (the terminal REPL over DAP) and by the tests.

    client = DapClient("127.0.0.1", 5679)
    client.request("initialize", {"adapterID": "dynstep"})
    client.request("attach", {"token": "..."}); client.wait_event("initialized")
    event = client.events.get()                 # stopped, output, exited, terminated, ...
"""

from __future__ import annotations

import json
import queue
import signal
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from ..core.events import Warning_, emit
from .protocol import FrameReader, ProtocolError, encode, start_thread


class ClientError(Exception):
    """A request failed (the response's message), or the connection is gone."""


class DapClient:
    def __init__(self, host: str, port: int, *, timeout: float = 10.0,
                 on_message: Callable[[dict[str, Any]], None] | None = None, queue_events: bool = True,
                 send_timeout: float | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(None)
        if send_timeout is not None and hasattr(socket, "SO_SNDTIMEO"):
            # a peer that stops reading (a SIGSTOPped rank) makes `send` fail (OSError) instead of blocking
            # forever; receiving stays blocking
            seconds = int(send_timeout)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                                 struct.pack("ll", seconds, int((send_timeout - seconds) * 1e6)))
        self.timeout = timeout
        self.on_message, self.queue_events = on_message, queue_events
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._seq = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, queue.Queue[dict[str, Any] | None] | Callable[[dict[str, Any] | None], None]] = {}
        self.closed = threading.Event()
        self._reader = start_thread(self._read_loop, "dynstep-dap-client")

    def _read_loop(self) -> None:
        if hasattr(signal, "pthread_sigmask") and threading.current_thread() is not threading.main_thread():
            # Ctrl-C goes to the main thread (where `dynstep attach` turns it into a pause request)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        reader = FrameReader(self.sock, frame_timeout=60.0)
        try:
            while (body := reader.read()) is not None:
                msg = json.loads(body)
                if self.on_message is not None:
                    _guarded(self.on_message, msg)
                if msg.get("type") == "response":
                    with self._lock:
                        waiter = self._waiting.pop(msg.get("request_seq"), None)
                    _deliver(waiter, msg)
                elif self.queue_events:
                    self.events.put(msg)
        except (OSError, ProtocolError, ValueError, RecursionError):   # a server sending garbage ends the session
            pass
        finally:
            self.closed.set()
            with self._lock:
                waiters, self._waiting = list(self._waiting.values()), {}
            for waiter in waiters:
                _deliver(waiter, None)
            self.events.put(None)

    def send(self, command: str, arguments: dict[str, Any] | None = None,
             on_response: Callable[[dict[str, Any] | None], None] | None = None) -> queue.Queue:
        """Send a request; its response (None when the connection closed first) arrives in the returned
        queue, or is passed to `on_response` on the reader thread."""
        waiter: Any = queue.Queue() if on_response is None else on_response
        with self._lock:
            if self.closed.is_set():
                _deliver(waiter, None)
                return waiter
            self._seq += 1
            self._waiting[self._seq] = waiter
            msg: dict[str, Any] = {"seq": self._seq, "type": "request", "command": command}
            if arguments is not None:
                msg["arguments"] = arguments
            self.sock.sendall(encode(msg))
        return waiter

    def request(self, command: str, arguments: dict[str, Any] | None = None, *,
                timeout: float | None = None) -> dict[str, Any]:
        """The response's body; ClientError with the server's message when the request failed."""
        response = self.response(command, arguments, timeout=timeout)
        if not response.get("success"):
            raise ClientError(response.get("message") or f"{command} failed")
        return response.get("body") or {}

    def response(self, command: str, arguments: dict[str, Any] | None = None, *,
                 timeout: float | None = None) -> dict[str, Any]:
        try:
            msg = self.send(command, arguments).get(timeout=timeout or self.timeout)
        except queue.Empty:
            raise ClientError(f"no answer to {command} within {timeout or self.timeout:.0f} s") from None
        except OSError as exc:
            raise ClientError(f"the connection is gone ({exc})") from None
        if msg is None:
            raise ClientError(f"the connection closed before the answer to {command}")
        return msg

    def wait_event(self, name: str, timeout: float | None = None, keep: list | None = None) -> dict[str, Any]:
        """The next event called `name`; other events go to `keep` (or are dropped)."""
        while True:
            try:
                msg = self.events.get(timeout=timeout or self.timeout)
            except queue.Empty:
                raise ClientError(f"no {name} event within {timeout or self.timeout:.0f} s") from None
            if msg is None:
                self.events.put(None)
                raise ClientError(f"the connection closed while waiting for {name}")
            if msg.get("event") == name:
                return msg
            if keep is not None:
                keep.append(msg)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _deliver(waiter: Any, msg: dict[str, Any] | None) -> None:
    if waiter is None:
        return
    if callable(waiter):
        _guarded(waiter, msg)
    else:
        waiter.put(msg)


def _guarded(callback: Callable[[Any], None], msg: Any) -> None:
    """A callback's failure is said, and the reader goes on (the other requests still get their answers)."""
    try:
        callback(msg)
    except Exception as exc:
        emit(Warning_(f"debug adapter client: a handler failed on {str(msg)[:120]}: {type(exc).__name__}: {exc}"))
