"""The Debug Adapter Protocol's wire format: Content-Length framing, JSON bodies, one writer per client.

A DAP message is ``Content-Length: N\\r\\n\\r\\n`` followed by N bytes of UTF-8 JSON. The reader
trusts nothing: headers are at most 8 KiB of ASCII, the length is digits only and at most 16 MiB,
duplicate lengths must agree, and once a frame has started the rest must arrive within
`FRAME_TIMEOUT_S` (a client stalling mid-frame is dropped, it never holds the program). Anything
else is a `ProtocolError`. A body must be a JSON object with an integer `seq` >= 0 (nvim-dap before
Dec 2023 numbers its first request 0), nested at most `MAX_DEPTH` levels. Whatever cannot be
trusted is answered with an error response (its `request_seq` is the message's seq when one can be
read, else 0) and an `output` line saying why, then the connection is closed (`refuse`).

    reader = FrameReader(sock); body = reader.read()          # bytes, or None at a clean EOF
    conn = Connection(sock); conn.send({"type": "event", "event": "initialized"})

`Connection.send` assigns `seq` and encodes under one lock (seq order is byte order), then queues
the bytes for the connection's writer thread: the program thread never blocks on a slow client,
and a client that stops reading for `OUT_QUEUE_MAX` messages is dropped. JSON is written with
``allow_nan=False`` (JavaScript's JSON.parse rejects NaN) and ``ensure_ascii=True``.
"""

from __future__ import annotations

import itertools
import json
import queue
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

MAX_HEADER_BYTES = 8 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64               # JSON nesting of one message (DAP's own messages need fewer than 10 levels)
FRAME_TIMEOUT_S = 10.0
OUT_QUEUE_MAX = 10_000


#: a request handler that sent its own response returns this instead of a body
ANSWERED = object()


class ProtocolError(Exception):
    """The byte stream cannot be trusted any more: the connection is closed."""


class DapError(Exception):
    """A request failed: its response has ``success: false`` and this message."""


def parse_content_length(header: bytes) -> int:
    try:
        text = header.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError("header is not ASCII") from None
    length = None
    for line in text.split("\r\n"):
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"malformed header line {line[:80]!r}")
        if name.strip().lower() != "content-length":
            continue
        value = value.strip()
        if not (value.isascii() and value.isdigit()) or len(value) > 12:
            raise ProtocolError(f"bad Content-Length {value[:40]!r}")
        if length is not None and int(value) != length:
            raise ProtocolError("conflicting Content-Length headers")
        length = int(value)
    if length is None:
        raise ProtocolError("no Content-Length header")
    if length > MAX_BODY_BYTES:
        raise ProtocolError(f"Content-Length {length} is over the limit of {MAX_BODY_BYTES} bytes")
    return length


class BadRequest(Exception):
    """A frame that is not a well-formed request. `req` is what can be answered: the message's seq
    and command where they can be read (else seq 0 and ""). `fatal`: the message is not a DAP message
    at all (not JSON, not an object, no integer seq, nested too deep): answer it, then close."""

    def __init__(self, why: str, req: dict[str, Any], fatal: bool = False) -> None:
        super().__init__(why)
        self.req, self.fatal = req, fatal


_SEQ = re.compile(rb'"seq"\s*:\s*(\d{1,10})\b')
_COMMAND = re.compile(rb'"command"\s*:\s*"([A-Za-z]{1,40})"')


def guessed_request(body: bytes) -> dict[str, Any]:
    """The seq and command of a message that cannot be parsed, read from its first bytes (before any
    nesting) when they are there; else seq 0: the error response then names no request of the client."""
    head = body[:4096]
    nested = min((i for i in (head.find(b"{", 1), head.find(b"[")) if i > 0), default=len(head))
    seq, command = _SEQ.search(head[:nested]), _COMMAND.search(head[:nested])
    return {"seq": int(seq.group(1)) if seq else 0, "command": command.group(1).decode() if command else ""}


def parse_request(body: bytes) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """A client's frame as (req: its seq and command, the command, its arguments); BadRequest otherwise."""
    try:
        msg = json.loads(body)
    except RecursionError:
        raise BadRequest(f"a message nested deeper than {MAX_DEPTH} levels", guessed_request(body), True) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"a frame that is not JSON ({exc})", guessed_request(body), True) from None
    if _too_deep(msg, MAX_DEPTH):
        raise BadRequest(f"a message nested deeper than {MAX_DEPTH} levels", guessed_request(body), True)
    seq = msg.get("seq") if isinstance(msg, dict) else None
    command = msg.get("command") if isinstance(msg, dict) else None
    req = {"seq": seq if type(seq) is int and seq >= 0 else 0, "command": command if isinstance(command, str) else ""}
    if type(seq) is not int or seq < 0:
        raise BadRequest("a message that is not a DAP message (an object with an integer seq >= 0)", req, True)
    if msg.get("type") != "request" or not isinstance(command, str):
        raise BadRequest("not a DAP request (type 'request' and a command are needed)", req)
    args = msg.get("arguments")
    args = {} if args is None else args
    if not isinstance(args, dict):
        raise BadRequest("arguments must be an object", req)
    return req, command, args


def _too_deep(value: Any, limit: int) -> bool:
    """Whether JSON containers nest deeper than `limit` (iterative: a deep message cannot recurse here)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def response(req: dict[str, Any], body: Any = None, *, error: str | None = None) -> dict[str, Any]:
    """The response to `req`: its body, or `success: false` with the message (also as the body's
    error, which VS Code shows; braces escaped, they are its placeholders)."""
    msg: dict[str, Any] = {"type": "response", "request_seq": req["seq"], "command": req["command"],
                           "success": error is None}
    if error is not None:
        msg["message"] = error
        msg["body"] = {"error": {"id": 1, "format": error.replace("{", "{{").replace("}", "}}"), "showUser": False}}
    elif body is not None:
        msg["body"] = body
    return msg


def reply(conn: "Connection", req: dict[str, Any], body: Any = None, *, error: str | None = None) -> None:
    """Send the response to `req`; a body that cannot be encoded (a stray object) is said as an error."""
    try:
        conn.send(response(req, body, error=error))
    except (ValueError, TypeError) as exc:
        conn.send(response(req, error=f"internal error: the response could not be encoded: {exc}"))


def notify(conn: "Connection", name: str, body: dict[str, Any] | None = None) -> str:
    """Send an event; "" when sent, else why it could not be encoded (the caller says so)."""
    msg: dict[str, Any] = {"type": "event", "event": name}
    if body is not None:
        msg["body"] = body
    try:
        conn.send(msg)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return ""


def refuse(conn: "Connection", req: dict[str, Any], why: str, who: str = "dynstep") -> None:
    """A message that cannot be trusted: an error response (request_seq 0 when the message had no
    readable seq) and an `output` line saying why, sent before the connection closes."""
    reply(conn, req, error=f"{why}; closing the connection")
    notify(conn, "output", {"category": "important", "output": f"{who}: the client sent {why}; closing the connection\n"})
    conn.flush_and_close(timeout=1.0)


def encode(msg: dict[str, Any]) -> bytes:
    body = json.dumps(msg, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


class FrameReader:
    """Reads whole frames from a socket with its own buffer (two frames in one packet, one frame in many)."""

    def __init__(self, sock: socket.socket, frame_timeout: float = FRAME_TIMEOUT_S) -> None:
        self.sock, self.frame_timeout, self.buf = sock, frame_timeout, bytearray()

    def _more(self, deadline: float | None) -> bytes:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise ProtocolError("frame not completed in time")
        return self.sock.recv(65536)

    def read(self) -> bytes | None:
        """The next message body; None on a clean end of stream between frames."""
        deadline = time.monotonic() + self.frame_timeout if self.buf else None
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            if len(self.buf) > MAX_HEADER_BYTES:
                raise ProtocolError("header too long")
            chunk = self._more(deadline)
            if not chunk:
                if self.buf:
                    raise ProtocolError("connection closed inside a header")
                return None
            self.buf += chunk
            deadline = deadline or time.monotonic() + self.frame_timeout
        if end > MAX_HEADER_BYTES:
            raise ProtocolError("header too long")
        length = parse_content_length(bytes(self.buf[:end]))
        del self.buf[:end + 4]
        deadline = deadline or time.monotonic() + self.frame_timeout
        while len(self.buf) < length:
            chunk = self._more(deadline)
            if not chunk:
                raise ProtocolError("connection closed inside a body")
            self.buf += chunk
        body = bytes(self.buf[:length])
        del self.buf[:length]
        return body


def mark_service_thread(thread: threading.Thread) -> threading.Thread:
    """debugpy/pydevd neither trace nor suspend this thread and leave it out of their thread list
    (otherwise a debugpy pause would freeze dynstep's server too); dynstep's own thread list skips it."""
    thread.pydev_do_not_trace = True          # type: ignore[attr-defined]
    thread.is_pydev_daemon_thread = True      # type: ignore[attr-defined]
    thread.dynstep_service = True             # type: ignore[attr-defined]
    return thread


def start_thread(target: Any, name: str, *args: Any) -> threading.Thread:
    thread = mark_service_thread(threading.Thread(target=target, args=args, name=name, daemon=True))
    thread.start()
    return thread


class Connection:
    """One client: a frame reader, and a writer thread fed by a bounded queue."""

    def __init__(self, sock: socket.socket, frame_timeout: float = FRAME_TIMEOUT_S) -> None:
        self.sock = sock
        self.reader = FrameReader(sock, frame_timeout)
        self.out: queue.Queue[bytes | None] = queue.Queue(OUT_QUEUE_MAX)
        self.seq = itertools.count(1)
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.writer = start_thread(self._write_loop, "dynstep-dap-writer")

    def bodies(self, broken: Callable[[Exception], None]) -> Iterator[bytes]:
        """The client's frames until it leaves; a stream that cannot be trusted any more ends them
        and is passed to `broken` (unless this side closed it)."""
        while not self.closed.is_set():
            try:
                body = self.reader.read()
            except (ProtocolError, OSError) as exc:
                if not self.closed.is_set():
                    broken(exc)
                return
            if body is None:
                return
            yield body

    def send(self, msg: dict[str, Any]) -> None:
        """Queue one message (seq assigned here); raises ValueError/TypeError if it cannot be encoded."""
        with self.lock:
            if self.closed.is_set():
                return
            data = encode({**msg, "seq": next(self.seq)})
            try:
                self.out.put_nowait(data)
            except queue.Full:
                self._close_locked()

    def _write_loop(self) -> None:
        while (data := self.out.get()) is not None:
            try:
                self.sock.sendall(data)
            except OSError:
                break
        self.close()

    def flush_and_close(self, timeout: float = 2.0) -> None:
        """After the last message: let the writer send what is queued, then close."""
        if threading.current_thread() is not self.writer:
            try:
                self.out.put(None, timeout=timeout)
            except queue.Full:
                pass
            self.writer.join(timeout)
        self.close()

    def close(self) -> None:
        with self.lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)   # wakes a writer in sendall and a reader in recv
        except OSError:
            pass
        self.sock.close()
        try:
            self.out.put_nowait(None)
        except queue.Full:
            pass
