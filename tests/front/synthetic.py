"""A long training run's recording, made up: `sites` probed linears, each value and gradient at every
call, stats on a sine so the plots move. Shared by the report's browser test and bench/report_open.py
(which imports it with tests/front on sys.path, as it does `chromium`).

    recording(path, calls=100, sites=50, nan=(17, 61))   # site 17's value is NaN from call 61 on
"""

from __future__ import annotations

import math
from pathlib import Path

from dynstep.core.records import Snapshot, Stats
from dynstep.recording.storage import save


def recording(path: Path, calls: int, sites: int, nan: tuple[int, int] | None = None) -> Path:
    snaps, seq = [], 0
    for call in range(calls):
        for kind in ("value", "grad"):
            for p in range(sites):
                seq += 1
                m = math.sin(call / 9 + p)
                bad = nan is not None and kind == "value" and p == nan[0] and call >= nan[1]
                stats = Stats(nan=64) if bad else Stats(m - 2, m + 2, m, 1.0, abs(m) + 2, count=64)
                snaps.append(Snapshot(kind=kind, probe="module:layers.*", node=f"linear_{p}",
                                      target="torch.nn.functional.linear", module=f"layers.{p}", source=f"model.py:{p}",
                                      graph="forward[0/0]", call=call, shape=(8, 8), dtype="float32", device="cpu",
                                      stats=stats, site=2 * p + (kind == "grad"), seq=seq, source_text="x = fc(x)"))
    return save(snaps, path)
