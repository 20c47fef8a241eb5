"""How long `dynstep report`'s page takes to be ready in headless Chromium, by recording size.

    python bench/report_open.py [--loads 5]

Builds recordings of 16, 1,000 and 10,000 hits (50 probes x calls x value and gradient, as a
long training run writes them), renders each with `dynstep report`, opens each page `--loads`
times in headless Chromium (interleaved) and prints the median time from navigation to
`window.__dynstepReady` (data parsed, charts wired, first table page drawn), the page's size, and
the ratio to the 16-hit page timed in the same run. Target (issue 17): a 10,000-hit recording is
ready "in under a few seconds". Needs Chromium (apt-get install -y chromium).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "front"))   # the DevTools-over-a-pipe driver and recordings the tests use

import chromium  # noqa: E402
from synthetic import recording  # noqa: E402

from dynstep.front.cli import main  # noqa: E402


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", type=int, default=5)
    args = ap.parse_args(argv)
    if chromium.find() is None:
        print("report_open: no chromium installed (apt-get install -y chromium)")
        return 2
    sizes = {"16 hits": (2, 4), "1,000 hits": (10, 50), "10,000 hits": (100, 50)}
    with tempfile.TemporaryDirectory() as tmp:
        pages, render = {}, {}
        warm = recording(Path(tmp) / "warm.dynstep", 1, 1)   # imports happen once, outside the timings
        assert main(["report", str(warm), "-o", str(Path(tmp) / "warm.html")]) == 0
        for name, (calls, sites) in sizes.items():
            rec = recording(Path(tmp) / f"r{calls}x{sites}.dynstep", calls, sites)
            html = Path(tmp) / f"r{calls}x{sites}.html"
            t0 = time.perf_counter()
            assert main(["report", str(rec), "-o", str(html)]) == 0
            render[name], pages[name] = time.perf_counter() - t0, html
        times: dict[str, list[float]] = {name: [] for name in sizes}
        with chromium.Chromium() as browser:
            for _ in range(args.loads):
                for name, html in pages.items():
                    page = browser.open(html)
                    assert page.errors == [] and page.ready, (name, page.errors)
                    times[name].append(page.seconds)
                    page.close()
        base = statistics.median(times["16 hits"])
        print(f"{'recording':>12} {'page MB':>8} {'dynstep report s':>17} {'ready s (median)':>17} {'ratio':>6}")
        for name, html in pages.items():
            med = statistics.median(times[name])
            print(f"{name:>12} {html.stat().st_size / 1e6:8.2f} {render[name]:17.2f} {med:17.3f} {med / base:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
