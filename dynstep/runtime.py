"""What happens when a probe fires at run time: the actions summary, record, print, nan, compare.

`on_probe(x, site_id)` is the Python kernel behind `dynstep::probe`. It never lets a probe crash
the model: unsupported tensors are skipped with a one-time warning, unexpected failures are
reported once and swallowed. Only the errors the user asked for (`nan="raise"`, a strided input
to a probe with `non_contiguous="error"`) propagate.

When the native kernel (csrc/probe_cpu.cpp) is loaded, every site is mirrored into its registry
(`attach_native`). The native kernel then keeps hits in per-site rings and Python collects them
lazily (`drain_native`, called when a session or a TensorProbe is read, opened or closed); it
calls back into `native_hit` only for hits that need Python (print, a non-finite value with the
nan action, actions only Python implements).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import math
import os
import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Protocol

import torch

from .errors import Abort, DynstepError, NonFiniteError
from .records import Snapshot, Stats
from .sites import SITES, HandConfig, Site
from .stats import nonfinite_counts, stats_of, unsupported_reason

log = logging.getLogger("dynstep")
_lock = threading.Lock()
_calls: collections.Counter[int] = collections.Counter()
_seq = itertools.count(1)
_warned: set[tuple[int, str]] = set()
_native: ModuleType | None = None
_sinks: dict[int, "RecordSink"] = {}
_checks: dict[int, "CheckState"] = {}
_closed: set[int] = set()

NATIVE_ACTIONS = ("summary", "record", "print", "nan")


class RecordSink(Protocol):
    """Where a hand-placed probe's hits go instead of the sessions."""

    def add(self, snap: Snapshot) -> None: ...
    def count_dropped(self, ring: int, memory: int) -> None: ...


@dataclasses.dataclass
class CheckState:
    """Sticky compare / non-finite state of one site (Python kernel side)."""

    nonfinite: bool = False
    failed: bool = False
    message: str = ""


@dataclasses.dataclass(frozen=True)
class SiteReport:
    calls: int
    nonfinite: bool
    failed: bool
    message: str


# -- the Python kernel --------------------------------------------------------------------------
def on_probe(x: torch.Tensor, site_id: int) -> None:
    if site_id in _closed:
        return
    site = SITES.get(site_id)
    if site.hand is not None and not _acts_now(x, site.hand):
        return
    reason = unsupported_reason(x)
    if reason is not None:
        _warn_once(site, reason, f"dynstep: probe at {_where(site)} skipped: {reason} is not supported")
        return
    if site.hand is not None and site.hand.non_contiguous == "error" and not x.is_contiguous():
        raise ValueError(non_contiguous_message(x))
    with _lock:
        call = _calls[site_id]
        _calls[site_id] += 1
    _guarded(x, site, call, None)


def native_hit(x: torch.Tensor, site_id: int, call: int, numbers: tuple) -> None:
    """Called by the native kernel for a hit that needs Python; stats already computed."""
    _guarded(x, SITES.get(site_id), call, Stats(*numbers))


def _guarded(x: torch.Tensor, site: Site, call: int, stats: Stats | None) -> None:
    try:
        _run_actions(x, site, call, stats)
    except (DynstepError, Abort):
        raise
    except Exception as exc:  # a probe must never take the model down
        _warn_once(site, type(exc).__name__,
                   f"dynstep: probe at {_where(site)} failed and was skipped: {exc!r}")


def _acts_now(x: torch.Tensor, hand: HandConfig) -> bool:
    if hand.when == "always":
        return True
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def non_contiguous_message(x: torch.Tensor) -> str:
    return (f"dynstep probe: input of shape {tuple(x.shape)} with strides {tuple(x.stride())} is not "
            'contiguous; pass non_contiguous="copy" to probe a contiguous copy, or probe '
            "x.contiguous() yourself")


def _run_actions(x: torch.Tensor, site: Site, call: int, stats: Stats | None) -> None:
    acts = site.actions
    if "pause" in acts:   # a gradient pause (pauses on values use dynstep::pause)
        from .stepper import on_grad_pause

        on_grad_pause(x, site)
        return
    hand = site.hand
    python_kernel = stats is None
    observing = any(a in acts for a in ("summary", "record", "print"))
    checking = hand is not None and (hand.expected is not None or hand.check_finite)
    if stats is None and (observing or checking):
        stats = stats_of(x)
    if python_kernel and checking and hand is not None and stats is not None:
        _check(x, site.id, hand, stats, call)  # the native kernel did this itself
    if "nan" in acts:
        nan, inf = (stats.nan, stats.inf) if stats is not None else nonfinite_counts(x)
        if nan or inf:
            _nonfinite(site, nan, inf, x, call)
    if not observing or stats is None:
        return
    every = hand.every if hand is not None else 1
    printing = "print" in acts and call % every == 0
    keep = "summary" in acts or "record" in acts
    if not (keep or printing):
        return
    tensor = x.detach().to("cpu", copy=True) if "record" in acts else None
    snap = snapshot_for(site, call, tuple(int(s) for s in x.shape), str(x.dtype).replace("torch.", ""),
                        str(x.device), stats, tensor, next_seq())
    if keep:
        _deliver(snap, None)
    if printing:
        from .events import ProbePrinted, emit

        values: tuple[float, ...] = ()
        if hand is not None and hand.max_items > 0:
            values = tuple(x.detach().reshape(-1)[:hand.max_items].double().cpu().tolist())
        emit(ProbePrinted(snap, values))


def snapshot_for(site: Site, call: int, shape: tuple[int, ...], dtype: str, device: str, stats: Stats,
                 tensor: torch.Tensor | None, seq: int) -> Snapshot:
    return Snapshot(kind=site.kind, probe=site.probe, node=site.node, target=site.target,
                    module=site.module, source=site.source, graph=site.graph, call=call, shape=shape,
                    dtype=dtype, device=device, stats=stats, tensor=tensor, site=site.id, seq=seq,
                    source_text=site.source_text)


def _deliver(snap: Snapshot, thread: int | None) -> None:
    sink = _sinks.get(snap.site)
    if sink is not None:
        sink.add(snap)
        return
    from .sessions import deliver

    deliver(snap, thread=thread)


def _check(x: torch.Tensor, site_id: int, hand: HandConfig, stats: Stats, call: int) -> None:
    """Sticky compare and non-finite flag, with the same rules and messages as the native kernel."""
    with _lock:
        state = _checks.setdefault(site_id, CheckState())
    expected = hand.expected
    if expected is not None and not state.failed:
        message = compare_message(x.detach().cpu(), expected, hand, call)
        if message:
            state.failed, state.message = True, message
    if hand.check_finite and (stats.nan or stats.inf) and not state.nonfinite:
        state.nonfinite = True
        state.message = state.message or f"call {call}: {stats.nan} NaN, {stats.inf} Inf"


def compare_message(x: torch.Tensor, expected: torch.Tensor, hand: HandConfig, call: int) -> str:
    """'' when `x` matches `expected` (torch.isclose rules in float64), else what differs."""
    if tuple(x.shape) != tuple(expected.shape):
        return f"call {call}: shape {tuple(x.shape)} does not match the expected shape {tuple(expected.shape)}"
    if x.dtype != expected.dtype:
        name = lambda d: str(d).replace("torch.", "")  # noqa: E731
        return f"call {call}: dtype {name(x.dtype)} does not match the expected dtype {name(expected.dtype)}"
    a, e = x.reshape(-1).double(), expected.reshape(-1).double()
    close = torch.isclose(a, e, rtol=hand.rtol, atol=hand.atol, equal_nan=hand.equal_nan)
    bad = (~close).nonzero().flatten()
    if bad.numel() == 0:
        return ""
    diffs = (a[bad] - e[bad]).abs()
    diffs = diffs[~torch.isnan(diffs)]
    maxd = float(diffs.max()) if diffs.numel() else math.nan
    i = int(bad[0])
    return (f"call {call}: {bad.numel()} of {a.numel()} values differ beyond rtol={hand.rtol:.6g}, "
            f"atol={hand.atol:.6g} (max abs diff {maxd:.6g}; first at flat index {i}: "
            f"got {float(a[i]):.6g}, expected {float(e[i]):.6g})")


def _nonfinite(site: Site, nan: int, inf: int, x: torch.Tensor, call: int) -> None:
    what = ", ".join(p for p in (f"{nan} NaN" if nan else "", f"{inf} Inf" if inf else "") if p)
    kind = "gradient of" if site.kind == "grad" else "output of"
    message = (f"{what} in the {kind} {site.target} (node {site.node}"
               f"{', module ' + site.module if site.module else ''}) at {site.source or '<unknown line>'}"
               f"{': ' + site.source_text if site.source_text else ''}  [graph {site.graph}, call {call}]")
    mode = site.nan_mode or "raise"
    if mode == "warn":
        warnings.warn("dynstep: " + message, RuntimeWarning, stacklevel=2)
        return
    if mode == "stop":
        from .stepper import stop_nonfinite

        stop_nonfinite(x, site, message)
        return
    raise NonFiniteError(message, node=site.node, target=site.target, source=site.source,
                         module=site.module, graph=site.graph, nan=nan, inf=inf)


def _where(site: Site) -> str:
    return f"{site.node} ({site.source or site.graph})"


def _warn_once(site: Site, key: str, message: str) -> None:
    with _lock:
        if (site.id, key) in _warned:
            return
        _warned.add((site.id, key))
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def next_seq() -> int:
    native = _native
    return int(native.next_seq()) if native is not None else next(_seq)


# -- the native side ----------------------------------------------------------------------------
def attach_native(module: ModuleType) -> None:
    """Mirror every site (present and future) into the native registry."""
    global _native
    _native = module
    module.set_memory_cap(_cap)
    for site in SITES.all():
        register_native(site)
    SITES.listen(register_native)


@dataclasses.dataclass(frozen=True)
class RecordMemory:
    """Bytes of record copies held in native rings, and the cap (oldest copies dropped first)."""

    held: int
    cap: int
    native: bool


DEFAULT_RECORD_MEMORY_CAP = 1 << 30


def set_record_memory_cap(nbytes: int) -> None:
    """Cap the bytes all native record rings may hold together.

    Policy when a new record would exceed it: the oldest record copies (lowest hit order, across
    all probes) are dropped until it fits; a single copy larger than the cap is not kept (its
    stats still are). Drops are counted in `Session.dropped` / `TensorProbe.state().dropped` and
    `dropped_by_memory_cap`. Without the native kernel, records go straight to session rings,
    which are bounded by each probe's ring capacity only.
    """
    if nbytes < 0:
        raise ValueError(f"record memory cap must be >= 0 bytes, got {nbytes}")
    global _cap
    _cap = int(nbytes)
    native = _native
    if native is not None:
        native.set_memory_cap(_cap)


def record_memory() -> RecordMemory:
    native = _native
    if native is None:
        return RecordMemory(0, _cap, False)
    held, cap = native.memory()
    return RecordMemory(int(held), int(cap), True)


_cap = int(os.environ.get("DYNSTEP_RECORD_MEMORY", DEFAULT_RECORD_MEMORY_CAP))


_immediate = False


def set_immediate(on: bool) -> None:
    """Native hits go to Python as they happen (on) or wait in native rings until read (off).

    Sessions turn this on while a session streams to a file (a crash must not lose hits that sat
    in native rings) or while sessions are open in more than one thread (each thread's hits must
    reach its own sessions, not share one ring between reads).
    """
    global _immediate
    if on == _immediate:
        return
    drain_native()
    _immediate = on
    if _native is not None:
        for site in SITES.all():
            if _native.is_registered(site.id) and site.id not in _closed:
                register_native(site)


def action_bits(site: Site) -> int:
    native = _native
    assert native is not None
    bits = native.ACTION_BITS
    mask = bits["python"] if _immediate and site.hand is None else 0
    for action in site.actions:
        mask |= bits[action] if action in NATIVE_ACTIONS else bits["python"]
    hand = site.hand
    if hand is not None:
        if hand.when == "capture":
            mask |= bits["when_capture"]
        if hand.non_contiguous == "error":
            mask |= bits["reject_non_contiguous"]
        if hand.expected is not None:
            mask |= bits["compare"]
        if hand.check_finite:
            mask |= bits["nonfinite_flag"]
    return mask


def register_native(site: Site) -> None:
    native = _native
    if native is None or site.id in _closed:
        return
    capacity = site.capacity if "record" in site.actions else 1024
    every = site.hand.every if site.hand is not None else 1
    native.register_site(site.id, action_bits(site), capacity, every)
    if site.hand is not None and site.hand.expected is not None:
        h = site.hand
        native.set_compare(site.id, h.expected, h.rtol, h.atol, h.equal_nan)


def drain_native(site_id: int | None = None) -> int:
    """Move what native rings hold into sessions and probe sinks; returns how many hits moved."""
    native = _native
    if native is None:
        return 0
    entries, dropped = native.drain(-1 if site_id is None else site_id)
    for sid, seq, call, thread, numbers, shape, dtype, tensor, device in entries:
        snap = snapshot_for(SITES.get(sid), call, tuple(shape), dtype, device, Stats(*numbers), tensor, seq)
        _deliver(snap, thread or None)  # 0: a CUDA hit harvested from the device ring: the drainer's sessions
    for sid, (ring, memory) in dropped.items():
        sink = _sinks.get(sid)
        if sink is not None:
            sink.count_dropped(ring, memory)
        else:
            from .sessions import count_dropped

            count_dropped(SITES.get(sid).probe, ring, memory)
    return len(entries)


# -- hand-placed probes (dynstep.probe_api) -----------------------------------------------------
def set_sink(site_id: int, sink: RecordSink) -> None:
    _sinks[site_id] = sink


def close_site(site_id: int) -> None:
    """Stop a site for good: later hits do nothing, native state is freed. Idempotent.

    Natively the site stays registered as a closed no-op (compiled graphs may still call it), and
    a CUDA graph that captured it may still replay: its hits are ignored, and the CUDA payloads
    that graph holds are freed when the graph is destroyed (csrc/cuda/probe_cuda_op.cpp).
    """
    drain_native(site_id)
    _closed.add(site_id)
    native = _native
    if native is not None:
        native.close_site(site_id)
    _sinks.pop(site_id, None)


def site_report(site_id: int) -> SiteReport:
    """Hits and sticky flags of one site, from whichever kernel served it."""
    py = _checks.get(site_id, CheckState())
    calls, nonfinite, failed, message = _calls[site_id], py.nonfinite, py.failed, py.message
    native = _native
    if native is not None and native.is_registered(site_id):
        n_calls, n_nonfinite, n_failed, n_message, *_ = native.site_state(site_id)
        calls += n_calls
        nonfinite, failed = nonfinite or n_nonfinite, failed or n_failed
        message = message or n_message
    return SiteReport(calls, nonfinite, failed, message)


def reset_checks(site_id: int) -> None:
    _checks.pop(site_id, None)
    native = _native
    if native is not None:
        native.reset_flags(site_id)


def hit_count(site_id: int) -> int:
    return site_report(site_id).calls
