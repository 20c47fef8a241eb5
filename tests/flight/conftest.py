"""Each flight test starts without a flight recorder and leaves none behind (its hooks removed)."""

from __future__ import annotations

import pytest

import dynstep.flight


@pytest.fixture(autouse=True)
def _no_recorder():
    dynstep.flight.stop()
    yield
    dynstep.flight.stop()


@pytest.fixture
def dumps(tmp_path):
    return tmp_path / "dumps"
