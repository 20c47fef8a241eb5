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


def ladder(backend: str | Callable[..., Any], mode: str | None) -> list[tuple[str, str | None]]:
    """The stages below the backend under test, in order: (backend, mode).

    aot_eager, then AOTAutograd with Inductor's decompositions and partitioner; when Inductor runs
    with a `mode=` (reduce-overhead: CUDA graphs), Inductor in its default mode is a stage of its
    own, so a divergence that only the mode brings is told apart from one Inductor always makes.
    """
    rungs: list[tuple[str, str | None]] = [(b, None) for b in LADDER if b not in ("eager", backend)]
    if backend == "inductor" and mode not in (None, "default"):
        rungs.append(("inductor", None))
    return rungs


def rung_name(backend: str | Callable[..., Any], mode: str | None) -> str:
    name = backend_name(backend)
    return f"{name} (mode={mode})" if mode not in (None, "default") else name


def compile_graph(gm: torch.fx.GraphModule, inputs: Sequence[Any], backend: str | Callable[..., Any], *,
                  mode: str | None = None, options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """`options` as torch.compile takes them: Inductor config for "inductor", `options=` for a callable."""
    from ..compilers import inner

    if options and backend == "inductor":
        from .._compat.bisector import inductor_with_options

        return inductor_with_options(mode, options)(gm, list(inputs))
    if options and callable(backend):
        return backend(gm, list(inputs), options=options)
    return inner.compile_plain(gm, list(inputs), backend, mode=mode)
