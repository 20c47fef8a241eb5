"""What the flight recorder (dynstep/flight/) reads of torch beyond its public API."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def tensor_version(t: Any) -> int:
    # torch/csrc/autograd/python_variable.cpp: Tensor._version, the version counter every in-place
    # op bumps (what autograd checks saved tensors with); no public getter exists
    return int(t._version)


@contextlib.contextmanager
def inductor_fallback_random() -> Iterator[None]:
    # torch/_inductor/config.py: fallback_random makes Inductor draw random numbers through eager's
    # generator (aten.rand & co.) instead of its own Philox kernels: a replay restores the CPU
    # generator's state and eager and compiled then draw the same numbers
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fallback_random=True):
        yield
