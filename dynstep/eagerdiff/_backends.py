"""How the diff engine compiles a graph: by name through superstep's inner adapters, or a callable.

    fn = compile_graph(gm, inputs, "inductor", mode=None)
    name = backend_name(my_backend)

Kept apart so the engine does not care whether `backend` is "inductor", "aot_eager",
"aot_eager_decomp_partition", a registered name, or a `(gm, example_inputs) -> callable`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.fx

LADDER = ("eager", "aot_eager", "aot_eager_decomp_partition")


def backend_name(backend: str | Callable[..., Any]) -> str:
    if isinstance(backend, str):
        return backend
    return getattr(backend, "__name__", type(backend).__name__)


def compile_graph(gm: torch.fx.GraphModule, inputs: Sequence[Any], backend: str | Callable[..., Any], *,
                  mode: str | None = None) -> Callable[..., Any]:
    from dynstep.backends import inner

    return inner.compile_plain(gm, list(inputs), backend, mode=mode)
