"""Hand-placed probes for eager code and hand-written CUDA graph captures, on `dynstep::probe`.

    probe = TensorProbe("mid", [PrintAction(max_items=8), RecordAction(capacity=16),
                                CheckAction(expected, rtol=1e-5, atol=1e-8)])
    with torch.cuda.graph(g):
        mid = probe(static_x + 2)          # returns its input unchanged
    g.replay(); torch.cuda.synchronize()
    probe.records(); probe.assert_ok(); probe.close()

A probe call is one `dynstep::probe(x, site)` op call, so inside a `torch.compile`d function it
is traced into the graph (no graph break) and Inductor keeps it, in order. `when="capture"` (the
default, as in torch-cudagraph-debug) acts only while the current CUDA stream is capturing, so it
does nothing in eager warm-up and nothing at all on CPU; `when="always"` acts on every call.
The torch-cudagraph-debug v0.1 names are aliases: `CudaGraphTensorProbe` (also takes `mode=`),
`TensorPrint`, `TensorRecord`, `TensorCompare`, `probe.attach_grad`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.errors import CheckFailed
from ..core.records import Snapshot
from ..core.sites import SITES, HandConfig
from . import registration, rings, runtime
from . import switch as _switch


@dataclasses.dataclass(frozen=True)
class PrintAction:
    """Emit a one-line summary and the first `max_items` values every `every`-th hit."""

    max_items: int = 8
    every: int = 1
    enabled: bool = True


@dataclasses.dataclass(frozen=True)
class RecordAction:
    """Keep CPU copies of the last `capacity` hits (read with `probe.records()`)."""

    capacity: int = 8
    enabled: bool = True


@dataclasses.dataclass(frozen=True)
class CheckAction:
    """Sticky compare against `expected` (torch.isclose rules); with expected=None, a finiteness check."""

    expected: Any = None
    rtol: float = 1e-5
    atol: float = 1e-8
    equal_nan: bool = False
    enabled: bool = True

    def __post_init__(self) -> None:
        """Checked when made: what the compare needs, said in the error, not a TypeError from torch later."""
        if self.expected is not None:
            _expected_tensor(self.expected, copy=False)
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"CheckAction({name}={value!r}): expected a finite number >= 0 (torch.isclose's "
                                 f"{name})")
        if not isinstance(self.equal_nan, bool):
            raise TypeError(f"CheckAction(equal_nan={self.equal_nan!r}): expected True or False")


def _expected_tensor(expected: Any, copy: bool = True) -> torch.Tensor:
    """`expected` as a CPU tensor of numbers (`copy=False`: only checked, a tensor stays where it is);
    TypeError saying what it must be otherwise."""
    why = "a string" if isinstance(expected, (str, bytes)) else None
    tensor = expected if isinstance(expected, torch.Tensor) else None
    if why is None and tensor is None:
        try:
            tensor = torch.as_tensor(expected)
        except (TypeError, ValueError, RuntimeError) as exc:
            why = f"{type(expected).__name__} ({str(exc).splitlines()[0][:80]})"
    if tensor is not None and tensor.dtype not in _NUMERIC:
        tensor, why = None, f"a tensor of {tensor.dtype}"
    if tensor is None:
        raise TypeError(f"CheckAction(expected={_short(expected)}): expected a tensor, a number or a (nested) list of "
                        f"numbers to compare each hit with (or None: a finiteness check), got {why}")
    return tensor.detach().to("cpu").contiguous() if copy else tensor


_NUMERIC = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
            torch.bfloat16, torch.float32, torch.float64}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


Action = PrintAction | RecordAction | CheckAction


@dataclasses.dataclass(frozen=True)
class ProbeState:
    name: str
    calls: int
    held: int                  # records waiting in the probe
    dropped: int               # records dropped: ring full or record memory cap
    dropped_by_memory_cap: int
    ok: bool
    message: str


class _Store:
    """The probe's own record ring (the sink runtime delivers this probe's hits to)."""

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        self.ring: collections.deque[Snapshot] = collections.deque(maxlen=max(capacity, 1))
        self.dropped = 0
        self.dropped_by_memory_cap = 0

    def add(self, snap: Snapshot) -> None:
        with self._lock:
            if len(self.ring) == self.ring.maxlen:
                self.dropped += 1
            self.ring.append(snap)

    def count_dropped(self, ring: int, memory: int) -> None:
        with self._lock:
            self.dropped += ring + memory
            self.dropped_by_memory_cap += memory


class TensorProbe:
    """A named probe: `probe(x)` returns `x` and runs the actions on its value."""

    def __init__(self, name: str, actions: Sequence[Action] = (), *, when: str = "capture",
                 non_contiguous: str = "error") -> None:
        if when not in ("capture", "always"):
            raise ValueError(f"TensorProbe({name!r}): when={when!r}; expected 'capture' or 'always'")
        if non_contiguous not in ("error", "copy"):
            raise ValueError(f"TensorProbe({name!r}): non_contiguous={non_contiguous!r}; "
                             "expected 'error' or 'copy'")
        self.name = name
        self.when = when
        self.non_contiguous = non_contiguous
        self.actions = tuple(actions)
        self._closed = False
        self._site_id: int | None = None
        active = _active_actions(name, self.actions)
        self._store = _Store(active[RecordAction].capacity if RecordAction in active else 1)
        if active:
            self._site_id = self._register(active)

    def _register(self, active: dict[type, Action]) -> int:
        registration.ensure()   # the op's kernels (native when it builds)
        pr, rec, chk = active.get(PrintAction), active.get(RecordAction), active.get(CheckAction)
        expected = None
        if isinstance(chk, CheckAction) and chk.expected is not None:
            expected = _expected_tensor(chk.expected)
        hand = HandConfig(every=pr.every if isinstance(pr, PrintAction) else 1,
                          max_items=pr.max_items if isinstance(pr, PrintAction) else 0,
                          when=self.when, non_contiguous=self.non_contiguous, expected=expected,
                          rtol=chk.rtol if isinstance(chk, CheckAction) else 1e-5,
                          atol=chk.atol if isinstance(chk, CheckAction) else 1e-8,
                          equal_nan=chk.equal_nan if isinstance(chk, CheckAction) else False,
                          check_finite=isinstance(chk, CheckAction) and chk.expected is None)
        acts = tuple(a for a, on in (("print", pr), ("record", rec)) if on is not None)
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        source = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        site = SITES.add(kind="value", probe=self.name, node=self.name, target="TensorProbe", module="",
                         source=source, source_text="", graph="hand-placed", actions=acts,
                         capacity=rec.capacity if isinstance(rec, RecordAction) else 1, hand=hand)
        runtime.set_sink(site.id, self._store)
        return site.id

    # -- use ----------------------------------------------------------------------------------
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # Traced by Dynamo, these reads become guards: closing the probe or flipping
        # dynstep.probes recompiles the caller's graph without the op (see dynstep/probe/switch.py).
        if self._site_id is not None and not self._closed and _switch.ENABLED:
            if x.is_nested:   # the dispatcher has no nested-tensor path for the op: skip, say so once
                runtime.skip(self._site_id, "nested tensor")
            else:
                torch.ops.dynstep.probe(x, self._site_id)
        return x

    def watch_grad(self, tensor: torch.Tensor, *, return_handle: bool = False) -> Any:
        """Probe `tensor`'s gradient when autograd produces it; returns `tensor` (and the hook handle)."""
        if not tensor.requires_grad:
            raise ValueError(f"TensorProbe({self.name!r}).watch_grad: the tensor does not require grad; "
                             "call it on a tensor that is part of the autograd graph")

        def hook(grad: torch.Tensor) -> None:
            self(grad)

        handle = tensor.register_hook(hook)
        return (tensor, handle) if return_handle else tensor

    attach_grad = watch_grad

    # -- reading ------------------------------------------------------------------------------
    def _collect(self) -> None:
        if self._site_id is not None and not self._closed:
            rings.drain_native(self._site_id)

    def records(self) -> list[Snapshot]:
        """Recorded hits, oldest first (call torch.cuda.synchronize() after an async replay)."""
        self._collect()
        with self._store._lock:
            return list(self._store.ring)

    def snapshot(self) -> Snapshot | None:
        """The most recent recorded hit, or None."""
        snaps = self.records()
        return snaps[-1] if snaps else None

    def clear_records(self) -> None:
        self._collect()
        with self._store._lock:
            self._store.ring.clear()

    def state(self) -> ProbeState:
        self._collect()
        report = rings.site_report(self._site_id) if self._site_id is not None else None
        bad = report is not None and (report.failed or report.nonfinite or bool(report.unchecked))
        message = (report.message or report.unchecked) if report is not None else ""
        return ProbeState(self.name, report.calls if report else 0, len(self._store.ring), self._store.dropped,
                          self._store.dropped_by_memory_cap, not bad, message)

    def assert_ok(self) -> None:
        """Raise CheckFailed if a CheckAction saw a mismatch or a non-finite value (sticky)."""
        st = self.state()
        if not st.ok:
            raise CheckFailed(f"TensorProbe {self.name!r}: {st.message}")

    def reset(self) -> None:
        """Clear the sticky check flags."""
        if self._site_id is not None:
            rings.reset_checks(self._site_id)

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop acting for good. Idempotent.

        Safe while a CUDA graph that captured this probe can still replay: those replays are
        ignored, and the probe's staging memory that graph holds is freed when the graph is.
        """
        if self._closed:
            return
        self._collect()
        self._closed = True
        if self._site_id is not None:
            rings.close_site(self._site_id)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "TensorProbe":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        acts = ", ".join(type(a).__name__ for a in self.actions if a.enabled)
        return f"TensorProbe({self.name!r}, [{acts}], when={self.when!r}{', closed' if self._closed else ''})"


def _active_actions(name: str, actions: Sequence[Action]) -> dict[type, Action]:
    active: dict[type, Action] = {}
    for a in actions:
        if not isinstance(a, (PrintAction, RecordAction, CheckAction)):
            raise TypeError(f"TensorProbe({name!r}): {a!r} is not an action; use PrintAction, "
                            "RecordAction or CheckAction")
        if not a.enabled:
            continue
        if type(a) in active:
            raise ValueError(f"TensorProbe({name!r}): two {type(a).__name__}s; give each probe at most one")
        active[type(a)] = a
    rec = active.get(RecordAction)
    if isinstance(rec, RecordAction) and rec.capacity < 1:
        raise ValueError(f"TensorProbe({name!r}): RecordAction(capacity={rec.capacity}); expected >= 1")
    pr = active.get(PrintAction)
    if isinstance(pr, PrintAction) and pr.every < 1:
        raise ValueError(f"TensorProbe({name!r}): PrintAction(every={pr.every}); expected >= 1")
    return active


def drain_records(probe: TensorProbe, consumer: Callable[[Snapshot], Any], *, synchronize: bool = True) -> int:
    """Pass each recorded hit to `consumer`, then clear them; returns how many were consumed.

    Synchronizes CUDA first (when initialized) so every replay launched so far has landed. The
    records are cleared only after every consumer call returned.
    """
    if synchronize and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    snaps = probe.records()
    for snap in snaps:
        consumer(snap)
    with probe._store._lock:
        for _ in snaps:
            if probe._store.ring:
                probe._store.ring.popleft()
    return len(snaps)


class CudaGraphTensorProbe(TensorProbe):
    """torch-cudagraph-debug's name; accepts its `mode=` for `when=`."""

    def __init__(self, name: str, actions: Sequence[Action] = (), *, mode: str | None = None,
                 when: str = "capture", non_contiguous: str = "error") -> None:
        super().__init__(name, actions, when=mode or when, non_contiguous=non_contiguous)


TensorPrint = PrintAction
TensorRecord = RecordAction
TensorCompare = CheckAction
