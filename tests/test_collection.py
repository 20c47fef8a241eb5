"""A test that never runs is not a test: every test file under tests/ is collected by the README's
test command (pytest once skipped tests/dist for years: `dist` is in its default norecursedirs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import STARTED_MODULES

ROOT = Path(__file__).resolve().parents[1]


def files_on_disk() -> set[str]:
    return {str(p) for pattern in ("test_*.py", "*_test.py") for p in (ROOT / "tests").rglob(pattern)
            if "node_modules" not in p.parts}



def collected(args: list[str]) -> tuple[set[str], int]:
    """The files and the number of tests `pytest --collect-only` finds for these arguments."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    ids = [ln for ln in proc.stdout.splitlines() if "::" in ln]
    return {str(ROOT / ln.split("::")[0]) for ln in ids}, len(ids)


def test_every_test_file_under_tests_is_collected():
    on_disk = files_on_disk()
    if on_disk <= STARTED_MODULES:        # this run collected the whole suite: nothing was left out
        return
    files, count = collected([])          # a partial run: ask pytest what the README's command collects
    missing = sorted(on_disk - files)
    assert not missing, f"test files pytest never collects (a folder it skips by name?): {missing}"
    _, explicit = collected(sorted(on_disk))
    assert count >= explicit, f"the default collection finds {count} tests, the test files hold {explicit}"
