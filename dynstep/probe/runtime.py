"""What happens when a probe fires at run time: the actions summary, record, print, nan, compare.

`on_probe(x, site_id)` is the Python kernel behind `dynstep::probe`. It never lets a probe crash
the model: unsupported tensors are skipped with a one-time warning, unexpected failures are
reported once and swallowed. Only the errors the user asked for (`nan="raise"`, a strided input
to a probe with `non_contiguous="error"`) propagate.

When the native kernel (csrc/probe_cpu.cpp) is loaded it calls back into `native_hit` only for
hits that need Python (print, a non-finite value with the nan action, actions only Python
implements); the rest wait in native rings (`dynstep.probe.rings`).

Where hits go is plugged in, not imported: a hand-placed probe's own sink (`set_sink`), else the
`Destination` (the sessions, connected by `dynstep.probe.registration`); a gradient pause or
`nan="stop"` goes to the `Stopper` the stepper connects (`dynstep.step.registration`).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import math
import threading
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Protocol

import torch

from ..core.errors import Abort, DynstepError, NonFiniteError
from ..core.events import ProbePrinted, emit
from ..core.records import Snapshot, Stats
from ..core.sites import SITES, HandConfig, Site
from ..jobs.identity import rank_world
from .stats import nonfinite_counts, stats_of, unsupported_reason

log = logging.getLogger("dynstep")


class RecordSink(Protocol):
    """Where a hand-placed probe's hits go instead of the sessions."""

    def add(self, snap: Snapshot) -> None: ...
    def count_dropped(self, ring: int, memory: int) -> None: ...


class RawAdd(Protocol):
    """A sink's way to take a summary hit as the native drain hands it over, with no `Snapshot` made
    (the flight recorder's: a dump drains tens of thousands of hits). `numbers` in `Stats` field order."""

    def __call__(self, seq: int, call: int, numbers: tuple, shape: Sequence[int], dtype: str, device: str) -> None: ...


class Destination(Protocol):
    """Where every other hit goes (the sessions): by the thread it happened in."""

    def deliver(self, snap: Snapshot, *, thread: int | None = None) -> None: ...
    def count_dropped(self, probe: str, ring: int, memory: int) -> None: ...


class Stopper(Protocol):
    """Who stops the program for a probe (the runtime stepper)."""

    def grad_pause(self, g: torch.Tensor, site: Site) -> None: ...
    def nonfinite(self, x: torch.Tensor, site: Site, message: str) -> None: ...


class ProbeRuntime:
    """The process-wide state of the probe kernels, in one object: `RUNTIME`, a listed singleton. The
    functions of this module (the Python kernel, delivery, checks) and of `dynstep.probe.rings` (the
    native side: rings, the record memory cap) read and change it and keep no state of their own (no
    `global` statement there: tests/core/test_layout.py). Sessions keep theirs in `probe.sessions`;
    `probe.switch.ENABLED` and `probe.fastpath`'s entry points are module attributes on purpose
    (generated code reads them)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: collections.Counter[int] = collections.Counter()   # hits the Python kernel counted
        self.seq = itertools.count(1)                 # hit order without the native kernel
        self.warned: set[tuple[int, str]] = set()     # (site, reason) warned once
        self.native: ModuleType | None = None         # the native extension, once attached (rings.py)
        self.sinks: dict[int, RecordSink] = {}        # a hand-placed or owned probe's own sink
        self.raw_adds: dict[int, RawAdd] = {}         # the sinks that take a drained hit without a Snapshot
        self.checks: dict[int, CheckState] = {}       # sticky compare / non-finite state (Python kernel)
        self.closed: set[int] = set()                 # sites whose later hits do nothing
        self.destination: Destination | None = None   # the sessions (probe.registration connects them)
        self.stopper: Stopper | None = None           # the stepper (step.registration connects it)
        # the native side (rings.py)
        self.record_cap = 0                           # bytes all native record rings may hold together
        self.capped: set[int] = set()                 # sites whose ring was bounded by the cap (warned)
        self.immediate = False                        # native hits go to Python as they happen


RUNTIME = ProbeRuntime()
_rt = RUNTIME


def connect(*, destination: Destination | None = None, stopper: Stopper | None = None) -> None:
    """Plug in where hits go and who stops (the probe and step packages' kernel modules do)."""
    if destination is not None:
        _rt.destination = destination
    if stopper is not None:
        _rt.stopper = stopper


@dataclasses.dataclass
class CheckState:
    """Sticky compare / non-finite state of one site (Python kernel side)."""

    nonfinite: bool = False
    failed: bool = False
    message: str = ""
    unchecked: str = ""    # why a check could not run on some hit (a check that did not run never passes)


# -- the Python kernel --------------------------------------------------------------------------
def on_probe(x: torch.Tensor, site_id: int) -> None:
    if site_id in _rt.closed:
        return
    site = SITES.get(site_id)
    if site.hand is not None and not _acts_now(x, site.hand):
        return
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        # The Python kernel reads values on the host: inside a capture that would synchronize a
        # capturing stream (an error, or a crash in the graph recorder). Say so once; never crash.
        _warn_once(site, "capture", f"dynstep: probe at {_where(site)}: its {', '.join(site.actions) or 'check'} "
                   "action cannot run inside CUDA graph capture for this value; skipped at replay")
        return
    reason = unsupported_reason(x)
    if reason is not None:
        _skip(site, reason)
        return
    if site.hand is not None and site.hand.non_contiguous == "error" and not x.is_contiguous():
        raise ValueError(non_contiguous_message(x))
    _guarded(x, site, next_call(site_id), None)


def skip(site_id: int, reason: str) -> None:
    """A hit this probe cannot take (for callers that see it before the op): warned once, checks marked."""
    _skip(SITES.get(site_id), reason)


def _skip(site: Site, reason: str) -> None:
    """A value the probe cannot handle: a one-time warning, and a check marked as not run."""
    _warn_once(site, reason, f"dynstep: probe at {_where(site)} skipped: {reason} is not supported")
    hand = site.hand
    if hand is not None and (hand.expected is not None or hand.check_finite):
        with _rt.lock:
            state = _rt.checks.setdefault(site.id, CheckState())
            state.unchecked = state.unchecked or f"not checked: a {reason} is not supported by the probe"


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
        if _rt.stopper is not None:
            _rt.stopper.grad_pause(x, site)
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
        if (nan or inf) and not site.owner:   # an owned site hands the hit to its sink, which decides
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
        deliver(snap, None)
    if printing:
        values: tuple[float, ...] = ()
        if hand is not None and hand.max_items > 0:
            values = tuple(x.detach().reshape(-1)[:hand.max_items].double().cpu().tolist())
        emit(ProbePrinted(snap, values))


def next_call(site_id: int) -> int:
    """This site's next call index on the Python side (what `on_probe` counts)."""
    with _rt.lock:
        call = _rt.calls[site_id]
        _rt.calls[site_id] += 1
    return call


def hit_without_tensor(site: Site, call: int, shape: tuple[int, ...], dtype: str, device: str, stats: Stats) -> None:
    """A summary hit whose statistics were computed elsewhere (a fused probe: dynstep.probe.fused)."""
    deliver(snapshot_for(site, call, shape, dtype, device, stats, None, next_seq()), None)


def snapshot_for(site: Site, call: int, shape: tuple[int, ...], dtype: str, device: str, stats: Stats,
                 tensor: torch.Tensor | None, seq: int, where: tuple[int, int] | None = None) -> Snapshot:
    rank, world = where or rank_world()   # `where`: (rank, world) found once for a whole drain
    return Snapshot(kind=site.kind, probe=site.probe, node=site.node, target=site.target,
                    module=site.module, source=site.source, graph=site.graph, call=call, shape=shape,
                    dtype=dtype, device=device, stats=stats, tensor=tensor, site=site.id, seq=seq,
                    source_text=site.source_text, rank=rank, world_size=world, identity=site.identity,
                    modules=site.modules)


def deliver(snap: Snapshot, thread: int | None) -> None:
    """Hand a hit to its probe's own sink, else to the sessions."""
    sink = _rt.sinks.get(snap.site)
    if sink is not None:
        sink.add(snap)
    elif _rt.destination is not None:
        _rt.destination.deliver(snap, thread=thread)


def count_dropped(site_id: int, ring: int, memory: int) -> None:
    sink = _rt.sinks.get(site_id)
    if sink is not None:
        sink.count_dropped(ring, memory)
    elif _rt.destination is not None:
        _rt.destination.count_dropped(SITES.get(site_id).probe, ring, memory)


def _check(x: torch.Tensor, site_id: int, hand: HandConfig, stats: Stats, call: int) -> None:
    """Sticky compare and non-finite flag, with the same rules and messages as the native kernel."""
    with _rt.lock:
        state = _rt.checks.setdefault(site_id, CheckState())
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
    rank, world = rank_world()
    if world > 1:
        message = f"rank {rank} of {world}: {message}"
    mode = site.nan_mode or "raise"
    if mode == "warn":
        warnings.warn("dynstep: " + message, RuntimeWarning, stacklevel=2)
        return
    if mode == "stop" and _rt.stopper is not None:
        _rt.stopper.nonfinite(x, site, message)
        return
    raise NonFiniteError(message, node=site.node, target=site.target, source=site.source,
                         module=site.module, graph=site.graph, nan=nan, inf=inf, rank=rank)


def nonfinite_at_replay(site: Site, nan: int, inf: int, call: int) -> None:
    """A NaN/Inf the device found inside a replayed CUDA graph: reported with the same message as a
    check outside capture; `nan="stop"` stops here, after the replay, without the value (the graph's
    memory holds it, and later nodes may have reused it)."""
    _nonfinite(site, nan, inf, torch.empty(0), call)


def _where(site: Site) -> str:
    return f"{site.node} ({site.source or site.graph})"


def _warn_once(site: Site, key: str, message: str) -> None:
    with _rt.lock:
        if (site.id, key) in _rt.warned:
            return
        _rt.warned.add((site.id, key))
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def next_seq() -> int:
    native = _rt.native
    return int(native.next_seq()) if native is not None else next(_rt.seq)


def set_native(module: ModuleType) -> None:
    """The native extension's sequence numbers order hits across Python and native (rings.py)."""
    _rt.native = module


def set_sink(site_id: int, sink: RecordSink, raw: RawAdd | None = None) -> None:
    """`sink` takes this site's hits; `raw`, when given, takes the ones drained from the native ring that
    carry no tensor (summary hits) without a `Snapshot` being made for them."""
    _rt.sinks[site_id] = sink
    if raw is None:
        _rt.raw_adds.pop(site_id, None)
    else:
        _rt.raw_adds[site_id] = raw


def close(site_id: int) -> None:
    """Later hits of this site do nothing (rings.close_site also stops its native side)."""
    _rt.closed.add(site_id)
    _rt.sinks.pop(site_id, None)
    _rt.raw_adds.pop(site_id, None)


def is_closed(site_id: int) -> bool:
    return site_id in _rt.closed


def calls(site_id: int) -> int:
    """Hits the Python kernel counted for this site."""
    return _rt.calls[site_id]


def check_state(site_id: int) -> CheckState:
    return _rt.checks.get(site_id, CheckState())


def reset_check(site_id: int) -> None:
    _rt.checks.pop(site_id, None)
