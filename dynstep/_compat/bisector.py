"""torch's CompilerBisector (torch/_inductor/compiler_bisector.py), run in-process on a small graph.

CompilerBisector walks the backends (eager, aot_eager, aot_eager_decomp_partition, its crossref
variant, inductor), and in the first that fails it disables each subsystem in turn (BACKENDS:
pre/joint/post-grad passes, the decompositions, config changes such as fallback_random or
emulate_precision_casts, cudagraphs, the lowerings), then bisects the one whose disabling fixes it
to a single application. The subsystems consult it themselves (`CompilerBisector.disable_subsystem`
in torch/_inductor/graph.py's lowering, torch/fx/passes/graph_transform_observer.py's passes,
torch/fx/experimental/proxy_tensor.py's decompositions; config changes through
`get_config_change` in torch/__init__.py's _TorchCompileInductorWrapper and
torch/_dynamo/backends/debugging.py). dynstep hands it a test that compiles one divergent node's
subgraph with the backend it names, instead of a whole program.

    found = bisect(lambda backend: good(backend))     # Bisected(backend="inductor", subsystem="lowerings", ...)
    wrapper = inductor_with_options(mode, {"max_fusion_size": 1})
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import torch

_OP_REPR = re.compile(r"op='([^']+)'")


@dataclasses.dataclass(frozen=True)
class BisectStep:
    """One call of the test: what CompilerBisector had switched off, and whether the graph was good."""

    backend: str
    subsystem: str          # "" while it walks the backends
    state: str              # "", "test_disable", "find_max_bounds" or "bisect"
    good: bool
    change: str = ""        # a config-change subsystem: "fallback_random=True"


@dataclasses.dataclass(frozen=True)
class Bisected:
    """What CompilerBisector found (its BisectionResult), with the op a lowering number stands for."""

    backend: str
    subsystem: str | None
    number: int | None
    debug_info: str         # the pass name, the lowered node's name, the decomposed op
    op: str                 # "aten.tanh" for a lowering or a decomposition, else ""
    config: tuple[tuple[str, Any], ...]   # (field, value) a config-change subsystem sets
    steps: tuple[BisectStep, ...]


def unavailable() -> str | None:
    """Why CompilerBisector cannot be driven here (None: it can)."""
    try:
        from torch._inductor.compiler_bisector import CompilerBisector  # noqa: F401
    except ImportError as exc:
        return f"torch {torch.__version__} has no torch._inductor.compiler_bisector ({exc})"
    busy = [k for k in ("TORCH_BISECT_BACKEND", "TORCH_BISECT_SUBSYSTEM", "TORCH_BISECT_MAX") if os.environ.get(k)]
    if busy:
        return f"a CompilerBisector session is already running in this process ({', '.join(busy)} set)"
    return None


def bisect(test: Callable[[str], bool]) -> Bisected | None:
    """`CompilerBisector.do_bisect` with `test(backend) -> good`: None when every backend is good.

    Its state lives in a private temporary folder (not the Inductor cache's bisect folder), its
    prints are swallowed, and everything it changed is restored on return."""
    from torch._inductor.compiler_bisector import CompilerBisector

    steps: list[BisectStep] = []
    ops: dict[int, str] = {}

    def fn() -> bool:
        backend = CompilerBisector.get_backend() or "inductor"
        subsystem = CompilerBisector.get_subsystem() or ""
        state = (CompilerBisector.get_run_state(backend, subsystem) or "") if subsystem else ""
        ops.clear()
        good = bool(test(backend))
        steps.append(BisectStep(backend, subsystem, state, good, _change(backend, subsystem)))
        return good

    saved = (CompilerBisector.bisection_enabled, CompilerBisector.in_process_cache)
    CompilerBisector.in_process_cache = folder = tempfile.mkdtemp(prefix="dynstep-bisect-")
    try:
        with _recording_lowered_ops(CompilerBisector, ops), contextlib.redirect_stdout(io.StringIO()):
            result = CompilerBisector.do_bisect(fn)
        return None if result is None else _found(CompilerBisector, result, ops, steps)
    finally:
        CompilerBisector.bisection_enabled, CompilerBisector.in_process_cache = saved
        shutil.rmtree(folder, ignore_errors=True)


def _found(bisector: Any, result: Any, ops: dict[int, str], steps: list[BisectStep]) -> Bisected:
    subsystem, number, info = result.subsystem, result.bisect_number, result.debug_info or ""
    obj = next((s for s in _subsystems(result.backend) if s.name == subsystem), None)
    config = ((obj.config_field, obj.config_value),) if obj is not None and hasattr(obj, "config_field") else ()
    op = ""
    if subsystem == "lowerings" and number is not None:
        op = ops.get(number, "")
    elif subsystem == "decomposition":
        m = _OP_REPR.search(info)
        op = m.group(1) if m else info.rsplit(".", 1)[0]
    return Bisected(result.backend, subsystem, number if not config else None, info, op, config, tuple(steps))


def _change(backend: str, subsystem: str) -> str:
    obj = next((s for s in _subsystems(backend) if s.name == subsystem), None)
    return f"{obj.config_field}={obj.config_value}" if obj is not None and hasattr(obj, "config_field") else ""


def _subsystems(backend: str) -> list[Any]:
    from torch._inductor.compiler_bisector import BACKENDS

    return list(BACKENDS.get(backend, ()))


@contextlib.contextmanager
def _recording_lowered_ops(bisector: Any, ops: dict[int, str]) -> Iterator[None]:
    """While bisecting the lowerings, note which aten op each counted lowering lowers: the bisect
    number then names an op (`V.graph.current_node` is the node GraphLowering.run_node lowers)."""
    original = bisector.__dict__["disable_subsystem"]

    def disable_subsystem(cls: Any, backend: str, subsystem: str, debug_info: Any = None) -> bool:
        before = cls.get_system_counter(subsystem, increment=False)
        disabled = original.__func__(cls, backend, subsystem, debug_info)
        if subsystem == "lowerings" and cls.get_system_counter(subsystem, increment=False) > before:
            ops[before] = _lowered_op()
        return disabled

    bisector.disable_subsystem = classmethod(disable_subsystem)
    try:
        yield
    finally:
        bisector.disable_subsystem = original


def _lowered_op() -> str:
    from torch._inductor.virtualized import V

    node = getattr(V.graph, "current_node", None)
    target = getattr(node, "target", None)
    name = str(target) if target is not None else ""
    return name.rsplit(".", 1)[0] if name.count(".") >= 2 else name   # aten.tanh.default -> aten.tanh


def inductor_with_options(mode: str | None, options: dict[str, Any] | None) -> Callable[..., Any]:
    # torch/__init__.py: the callable torch.compile(backend="inductor", mode=, options=) uses; it also
    # applies a CompilerBisector config change when one is active.
    return torch._TorchCompileInductorWrapper(mode, options, None)


@contextlib.contextmanager
def fresh_compiles() -> Iterator[None]:
    """No compiled graph is served from a cache meanwhile (kernel binaries still are, by their source):
    torch/_inductor/config.py fx_graph_cache and torch/_functorch/config.py enable_autograd_cache. Their
    keys cover the graph and the config, not a lowering or decomposition patched in this process."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        yield


# Inductor config that keeps every scheduler node its own kernel (torch/_inductor/config.py)
NO_FUSION = {"max_fusion_size": 1, "epilogue_fusion": False, "prologue_fusion": False}
