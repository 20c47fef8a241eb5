"""Inner-compiler adapters: how superstep hands a graph on, with or without its own hooks.

`compile_plain` is the transparent path (exactly what `torch.compile(m, backend=inner, mode=mode)`
would do). `compile_hooked` also gives superstep AOTAutograd's partitioned forward and backward
graphs for the inner compilers built on AOTAutograd (aot_eager, inductor); other backends get the
probed Dynamo graph only, and gradient taps then run as ordinary ops.

    fn = compile_plain(gm, example_inputs, "inductor", mode=None)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.fx

from dynstep import _compat

HOOKED = ("aot_eager", "inductor")


def has_aot_hooks(inner: str | Callable[..., Any]) -> bool:
    return isinstance(inner, str) and inner in HOOKED


def compile_plain(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], inner: str | Callable[..., Any],
                  *, mode: str | None) -> Callable[..., Any]:
    if callable(inner):
        return inner(gm, example_inputs)
    if inner == "eager":
        return gm.forward
    if inner == "inductor":
        return _compat.inductor_plain(mode)(gm, example_inputs)
    backend = _compat.lookup_backend(inner)
    if mode:
        return backend(gm, example_inputs, mode=mode)
    return backend(gm, example_inputs)


def compile_hooked(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], inner: str | Callable[..., Any],
                   *, mode: str | None,
                   rewrite: Callable[[torch.fx.GraphModule, bool], torch.fx.GraphModule],
                   around: Callable[[torch.fx.GraphModule, bool], Any] | None = None) -> Callable[..., Any]:
    """`around(graph, is_backward)`: a context manager around Inductor's compile of each partitioned graph."""
    if inner == "inductor":
        return _compat.inductor_with_graph_hooks(gm, example_inputs, mode=mode, rewrite=rewrite, around=around)
    if inner == "aot_eager":
        return _compat.aot_eager_with_graph_hooks(gm, example_inputs, rewrite=rewrite)
    return compile_plain(gm, example_inputs, inner, mode=mode)
