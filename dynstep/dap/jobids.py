"""Numbers of several DAP servers made unique for one client (the job's adapter, job.py).

A worker's number x (threadId, frameId, variablesReference, sourceReference; 0 means "none" and
stays 0) is ``x * N + i`` for the client, N workers, i the worker; memory references get an
``i:`` prefix. A request carrying one goes back to worker ``number % N`` with ``number // N``.

    ids = JobIds(2)
    ids.up(1, {"threadId": 1})                 -> {"threadId": 3}
    ids.route({"frameId": 3}), ids.down(...)   -> 1, {"frameId": 1}

Breakpoint ids go the other way: the adapter numbers the client's breakpoints itself, and each
worker's ids map to them by position in its answer to the same request (`learn`, `to_client`).
"""

from __future__ import annotations

from typing import Any

ID_KEYS = frozenset({"threadId", "frameId", "stackFrameId", "variablesReference", "sourceReference"})
REF_KEYS = frozenset({"memoryReference", "instructionPointerReference"})


class JobIds:
    def __init__(self, workers: int) -> None:
        self.n = max(1, workers)

    def one(self, i: int, number: int) -> int:
        return number * self.n + i

    def up(self, i: int, value: Any, command: str = "") -> Any:
        """A worker's body with its numbers made unique (a stackTrace's frame ids too)."""
        if isinstance(value, dict):
            out = {k: (self.one(i, v) if k in ID_KEYS and type(v) is int and v > 0 else
                       f"{i}:{v}" if k in REF_KEYS and isinstance(v, str) else self.up(i, v)) for k, v in value.items()}
            if command == "stackTrace":
                for frame in out.get("stackFrames", []):
                    if type(frame.get("id")) is int:
                        frame["id"] = self.one(i, frame["id"])
            return out
        if isinstance(value, list):
            return [self.up(i, v) for v in value]
        return value

    def down(self, value: Any) -> Any:
        """A client's arguments with the worker's own numbers."""
        if isinstance(value, dict):
            return {k: (v // self.n if k in ID_KEYS and type(v) is int and v > 0 else
                        v.partition(":")[2] if k in REF_KEYS and isinstance(v, str) else self.down(v))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self.down(v) for v in value]
        return value

    def route(self, args: dict[str, Any]) -> int | None:
        """The worker a request concerns: from the first number in it that came from a worker, else None."""
        source = args.get("source") if isinstance(args.get("source"), dict) else {}
        for value in (args.get("threadId"), args.get("frameId"), args.get("variablesReference"),
                      args.get("sourceReference"), source.get("sourceReference")):
            if type(value) is int and value > 0:
                return value % self.n
        prefix = str(args.get("memoryReference", "")).partition(":")[0]
        return int(prefix) % self.n if prefix.isdigit() else None


def learn(table: dict[int, int], ids: tuple[int, ...], msg: dict[str, Any] | None) -> None:
    """A worker's answer to a breakpoint request: its ids, position by position, are the client's `ids`."""
    bps = ((msg or {}).get("body") or {}).get("breakpoints") if msg and msg.get("success") else None
    for bp, mine in zip(bps if isinstance(bps, list) else [], ids):
        if isinstance(bp, dict) and type(bp.get("id")) is int:
            table[bp["id"]] = mine


def to_client(table: dict[int, int], bp: Any) -> Any:
    """One breakpoint body with the client's id."""
    if isinstance(bp, dict) and type(bp.get("id")) is int:
        return {**bp, "id": table.get(bp["id"], bp["id"])}
    return bp


def hits_to_client(table: dict[int, int], hits: Any) -> list[int]:
    """A stopped event's hitBreakpointIds, as the client knows them (ids it never saw are left out)."""
    return [table[i] for i in hits if i in table] if isinstance(hits, list) else []
