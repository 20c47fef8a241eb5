"""The native side of probes: sites mirrored into the native registry, rings drained into Python,
the record memory cap, and the sticky state a hand-placed probe reports.

When the native kernel (csrc/probe_cpu.cpp) is loaded, every site is mirrored into its registry
(`attach_native`). The native kernel then keeps hits in per-site rings and Python collects them
lazily (`drain_native`, called when a session or a TensorProbe is read, opened or closed), or as
they happen while `set_immediate(True)` (a streaming session, sessions in several threads).

    attach_native(module); drain_native(); site_report(site_id).calls
"""

from __future__ import annotations

import dataclasses
import warnings
from types import ModuleType

from ..core.options import env_value
from ..core.records import Stats
from ..core.sites import SITES, Site
from ..jobs.identity import rank_world
from . import runtime
from .runtime import RUNTIME as _rt

NATIVE_ACTIONS = ("summary", "record", "print", "nan")


@dataclasses.dataclass(frozen=True)
class SiteReport:
    calls: int
    nonfinite: bool
    failed: bool
    message: str
    unchecked: str = ""   # why a check did not run on some hit ("" when every hit was checked)


def attach_native(module: ModuleType) -> None:
    """Mirror every site (present and future) into the native registry."""
    runtime.set_native(module)
    module.set_callbacks(runtime.native_hit, runtime.on_probe)
    module.set_memory_cap(_rt.record_cap)
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
    _rt.record_cap = int(nbytes)
    native = _rt.native
    if native is not None:
        native.set_memory_cap(_rt.record_cap)


def record_memory() -> RecordMemory:
    native = _rt.native
    if native is None:
        return RecordMemory(0, _rt.record_cap, False)
    held, cap = native.memory()
    return RecordMemory(int(held), int(cap), True)


def _env_cap() -> int:
    cap = env_value("DYNSTEP_RECORD_MEMORY")   # checked against its range: it must fit the native int64
    return DEFAULT_RECORD_MEMORY_CAP if cap is None else cap


_rt.record_cap = _env_cap()
# What one preallocated ring slot costs (sizeof(Entry) in csrc/probe_state.h is 160 bytes on x86-64,
# before any copy is kept); the slots of one ring may take at most a quarter of the record memory cap.
SLOT_BYTES = 192


def set_immediate(on: bool) -> None:
    """Native hits go to Python as they happen (on) or wait in native rings until read (off).

    Sessions turn this on while a session streams to a file (a crash must not lose hits that sat
    in native rings) or while sessions are open in more than one thread (each thread's hits must
    reach its own sessions, not share one ring between reads).
    """
    if on == _rt.immediate:
        return
    drain_native()
    _rt.immediate = on
    native = _rt.native
    if native is not None:
        for site in SITES.all():
            if native.is_registered(site.id) and not runtime.is_closed(site.id):
                register_native(site)


def action_bits(site: Site) -> int:
    native = _rt.native
    assert native is not None
    bits = native.ACTION_BITS
    mask = bits["python"] if _rt.immediate and site.hand is None and not site.owner else 0   # owners have sinks
    for action in site.actions:
        mask |= bits[action] if action in NATIVE_ACTIONS else bits["python"]
    if "nan" in site.actions:
        # inside a captured CUDA graph the check cannot enter Python: the device records a sticky
        # non-finite flag instead, which `raise_first_nonfinite` reads after the replay
        mask |= bits["nonfinite_flag"]
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


def ring_slots(site: Site) -> int:
    """The site's record capacity, bounded so its preallocated ring fits a quarter of the memory cap."""
    bound = max(1, _rt.record_cap // 4 // SLOT_BYTES)
    if site.capacity <= bound:
        return site.capacity
    if site.id not in _rt.capped:
        _rt.capped.add(site.id)
        warnings.warn(f"dynstep: record={site.capacity} for probe {site.probe!r} at {site.node} would preallocate "
                      f"{site.capacity * SLOT_BYTES / 2**20:.0f} MiB of ring slots; keeping the last {bound} hits "
                      f"(a quarter of the record memory cap, {_rt.record_cap} bytes: dynstep.set_record_memory_cap or "
                      "DYNSTEP_RECORD_MEMORY raise it)", RuntimeWarning, stacklevel=2)
    return bound


def register_native(site: Site) -> None:
    native = _rt.native
    if native is None or runtime.is_closed(site.id):
        return
    # a stats-only site keeps 1024 hits natively, an owned one (the flight recorder) the ring it asked for
    capacity = ring_slots(site) if "record" in site.actions else (site.capacity if site.owner else 1024)
    every = site.hand.every if site.hand is not None else 1
    native.register_site(site.id, action_bits(site), capacity, every)
    if site.hand is not None and site.hand.expected is not None:
        h = site.hand
        native.set_compare(site.id, h.expected, h.rtol, h.atol, h.equal_nan)


def drain_native(site_id: int | None = None) -> int:
    """Move what native rings hold into sessions and probe sinks; returns how many hits moved."""
    native = _rt.native
    if native is None:
        return 0
    entries, dropped = native.drain(-1 if site_id is None else site_id)
    where = rank_world()
    raw_adds = _rt.raw_adds
    for sid, seq, call, thread, numbers, shape, dtype, tensor, device in entries:
        add = raw_adds.get(sid) if tensor is None else None
        if add is not None:
            add(seq, call, numbers, shape, dtype, device)
            continue
        snap = runtime.snapshot_for(SITES.get(sid), call, tuple(shape), dtype, device, Stats(*numbers), tensor, seq,
                                    where)
        runtime.deliver(snap, thread or None)  # 0: a CUDA hit harvested from the device ring: the drainer's sessions
    for sid, (ring, memory) in dropped.items():
        runtime.count_dropped(sid, ring, memory)
    return len(entries)


def harvest_device() -> tuple[int, int]:
    """CUDA hits the device has published -> their sites' native rings, in the order the device ran
    them, with their order numbers taken now; nothing reaches Python. -> (hits moved, hits with NaN/Inf
    harvested since the process started). The caller synchronized the device when it needs them all."""
    native = _rt.native
    if native is None:
        return 0, 0
    taken, nonfinite = native.harvest()
    return int(taken), int(nonfinite)


def flight_lines(prefixes: list[str], which: list[int], ints: list[int], floats: list[float]) -> str | None:
    """A flight dump's records.jsonl text, encoded natively (csrc/flight_lines.cpp; the arguments are
    described there), or None when the native kernel is not loaded or cannot take these numbers (the
    caller then encodes them in Python)."""
    native = _rt.native
    if native is None:
        return None
    try:
        return native.flight_lines(prefixes, which, ints, floats)
    except TypeError:   # a number pybind11 does not convert (an int where a float was, or a float in ints)
        return None


def close_site(site_id: int) -> None:
    """Stop a site for good: later hits do nothing, native state is freed. Idempotent.

    Natively the site stays registered as a closed no-op (compiled graphs may still call it), and
    a CUDA graph that captured it may still replay: its hits are ignored, and the CUDA payloads
    that graph holds are freed when the graph is destroyed (csrc/cuda/probe_cuda_op.cpp).
    """
    drain_native(site_id)
    runtime.close(site_id)
    native = _rt.native
    if native is not None:
        native.close_site(site_id)


def site_report(site_id: int) -> SiteReport:
    """Hits and sticky flags of one site, from whichever kernel served it."""
    py = runtime.check_state(site_id)
    calls, nonfinite, failed, message = runtime.calls(site_id), py.nonfinite, py.failed, py.message
    native = _rt.native
    if native is not None and native.is_registered(site_id):
        n_calls, n_nonfinite, n_failed, n_message, *_ = native.site_state(site_id)
        calls += n_calls
        nonfinite, failed = nonfinite or n_nonfinite, failed or n_failed
        message = message or n_message
    return SiteReport(calls, nonfinite, failed, message, py.unchecked)


def raise_first_nonfinite(site_ids: list[int]) -> None:
    """After a replayed CUDA graph: the first of `site_ids` (graph order) whose device check saw
    NaN/Inf in this replay is reported as the Python check would have (raise, warn or stop), and
    every flag is cleared for the next replay. The caller synchronized the device."""
    native = _rt.native
    if native is None:
        return
    first = None
    for site_id in site_ids:
        state = native.site_state(site_id)
        nonfinite, (call, nan, inf) = state[1], state[7:10]   # typed by the native side (probe_state.h)
        if nonfinite and first is None:
            first = (site_id, max(call, 0), nan, inf)   # call -1: a CUDA hit whose slot was overwritten unread
        if nonfinite:
            native.reset_flags(site_id)
    if first is not None:
        site_id, call, nan, inf = first
        runtime.nonfinite_at_replay(SITES.get(site_id), nan, inf, call)


def reset_checks(site_id: int) -> None:
    runtime.reset_check(site_id)
    native = _rt.native
    if native is not None:
        native.reset_flags(site_id)


def hit_count(site_id: int) -> int:
    return site_report(site_id).calls
