"""What happens when a probe fires at run time: the actions summary, record, print and nan.

`on_probe(x, site_id)` is the Python kernel behind `dynstep::probe`. It never lets a probe crash
the model: unsupported tensors are skipped with a one-time warning, unexpected failures are
reported once and swallowed. Only the errors the user asked for (`nan="raise"`) propagate.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import warnings

import torch

from .errors import Abort, DynstepError, NonFiniteError
from .records import Snapshot, Stats
from .sites import SITES, Site
from .stats import nonfinite_counts, stats_of, unsupported_reason

log = logging.getLogger("dynstep")
_lock = threading.Lock()
_calls: collections.Counter[int] = collections.Counter()
_seq = itertools.count(1)
_warned: set[tuple[int, str]] = set()


def on_probe(x: torch.Tensor, site_id: int) -> None:
    site = SITES.get(site_id)
    reason = unsupported_reason(x)
    if reason is not None:
        _warn_once(site, reason, f"dynstep: probe at {_where(site)} skipped: {reason} is not supported")
        return
    with _lock:
        call = _calls[site_id]
        _calls[site_id] += 1
    try:
        _run_actions(x, site, call)
    except (DynstepError, Abort):
        raise
    except Exception as exc:  # a probe must never take the model down
        _warn_once(site, type(exc).__name__,
                   f"dynstep: probe at {_where(site)} failed and was skipped: {exc!r}")


def _run_actions(x: torch.Tensor, site: Site, call: int) -> None:
    acts = site.actions
    if "pause" in acts:   # a gradient pause (pauses on values use dynstep::pause)
        from .stepper import on_grad_pause

        on_grad_pause(x, site)
        return
    observing = any(a in acts for a in ("summary", "record", "print"))
    stats: Stats | None = stats_of(x) if observing else None
    if "nan" in acts:
        nan, inf = (stats.nan, stats.inf) if stats is not None else nonfinite_counts(x)
        if nan or inf:
            _nonfinite(site, nan, inf, x, call)
    if not observing or stats is None:
        return
    tensor = x.detach().to("cpu", copy=True) if "record" in acts else None
    snap = Snapshot(kind=site.kind, probe=site.probe, node=site.node, target=site.target,
                    module=site.module, source=site.source, graph=site.graph, call=call,
                    shape=tuple(int(s) for s in x.shape), dtype=str(x.dtype).replace("torch.", ""),
                    device=str(x.device), stats=stats, tensor=tensor, site=site.id, seq=next(_seq),
                    source_text=site.source_text)
    if "summary" in acts or "record" in acts:
        from .sessions import deliver

        deliver(snap)
    if "print" in acts:
        from .events import ProbePrinted, emit

        emit(ProbePrinted(snap))


def _nonfinite(site: Site, nan: int, inf: int, x: torch.Tensor, call: int) -> None:
    what = ", ".join(p for p in (f"{nan} NaN" if nan else "", f"{inf} Inf" if inf else "") if p)
    kind = "gradient of" if site.kind == "grad" else "output of"
    message = (f"{what} in the {kind} {site.target} (node {site.node}"
               f"{', module ' + site.module if site.module else ''}) at {site.source or '<unknown line>'}"
               f"{': ' + site.source_text if site.source_text else ''}  [graph {site.graph}, call {call}]")
    mode = site.nan_mode or "raise"
    if mode == "stop":
        from .stepper import stop_nonfinite

        stop_nonfinite(x, site, message)
        return
    if mode == "warn":
        warnings.warn("dynstep: " + message, RuntimeWarning, stacklevel=2)
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


def hit_count(site_id: int) -> int:
    return _calls[site_id]
