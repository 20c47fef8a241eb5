"""The stable import path of the direct probe and publish calls in Inductor-generated code.

Inductor's wrapper for a graph with probes reads ``from dynstep.fastpath import probe as
dynstep_probe`` (and, with fused summaries, ``... import publish as dynstep_publish``;
dynstep.probe.fastpath writes those lines); generated code may sit in Inductor's
on-disk cache across dynstep versions, so this path stays. Importing it registers the probe
kernels first, so `probe` is the native direct entry whenever the native kernel loads.
"""

from __future__ import annotations

from .probe import registration as _registration

_registration.ensure()

from .probe.fastpath import probe, publish  # noqa: E402  (bound by ensure())

__all__ = ["probe", "publish"]
