"""Inductor pieces the fused summary statistics rely on: fake values for the nodes they add, the fusion
limits of the probed graph, and counting the kernels of a compiled graph.

    with in_fake_mode(fake_mode_of([x_fake])): ...
    with fusion_limits(extra_nodes=48): compile_fx_inner(...)
    kernel_count(compiled_graph)      # kernels in its generated code, or None
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any


def fake_mode_of(tensors: Sequence[Any]) -> Any:
    # torch/_guards.py: detect_fake_mode, the FakeTensorMode the partitioned graph's meta["val"]
    # tensors belong to (with its ShapeEnv under dynamic shapes)
    from torch._guards import detect_fake_mode

    return detect_fake_mode(list(tensors))


def in_fake_mode(mode: Any) -> contextlib.AbstractContextManager[Any]:
    return mode if mode is not None else contextlib.nullcontext()


@contextlib.contextmanager
def fusion_limits(extra_nodes: int) -> Iterator[None]:
    """Room in Inductor's fusion limits for `extra_nodes` more scheduler nodes per kernel.

    torch/_inductor/config.py: max_fusion_size (64 nodes per fused kernel) and cpp.max_horizontal_fusion_size
    (16 nodes per horizontal fusion on CPU, torch/_inductor/codegen/cpp.py: can_fuse_horizontal). Each
    fused summary adds four to six reductions beside the loop that computes its value; without the
    room, the CPU scheduler starts a new loop every few probes and recomputes the value in each.
    Both are part of the FX graph cache key, as every Inductor config value is.
    """
    import torch._inductor.config as config

    if extra_nodes <= 0:
        yield
        return
    patch = {"max_fusion_size": max(config.max_fusion_size, 64 + extra_nodes),
             "cpp.max_horizontal_fusion_size": max(config.cpp.max_horizontal_fusion_size, 16 + extra_nodes)}
    with config.patch(patch):
        yield


_KERNEL_DEFS = re.compile(r"^\w+ = async_compile\.(?:cpp_pybinding|cpp|triton|cuda|mps|halide)\(", re.M)


def kernel_count(compiled: Any) -> int | None:
    # torch/_inductor/output_code.py: CompiledFxGraph.source_code is the generated Python wrapper
    # (torch/_inductor/codegen/wrapper.py defines each kernel as `name = async_compile.<backend>(...)`);
    # None for a graph without one (cpp_wrapper, AOTInductor, a non-Inductor callable).
    code = getattr(compiled, "source_code", None)
    if not isinstance(code, str):
        return None
    return len(_KERNEL_DEFS.findall(code))
