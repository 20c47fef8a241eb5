"""Shared fixtures: a clean Dynamo cache and stepper per test, and captured stepper events."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache")


@pytest.fixture(autouse=True)
def _fresh_compile_state():
    import torch._dynamo

    from dynstep.stepper import STEPPER

    torch._dynamo.reset()
    STEPPER.reset()
    yield
    STEPPER.reset()
    torch._dynamo.reset()


@pytest.fixture
def events():
    from dynstep.events import use_sink

    seen: list[object] = []
    with use_sink(seen.append):
        yield seen
