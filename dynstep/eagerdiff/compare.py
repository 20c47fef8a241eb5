"""One call run eagerly and compiled, compared; and where they part (the pytest plugin's engine).

    output, mismatch = compare_call(model, (x,), {}, compiled=torch.compile(model), backend="inductor")
    mismatch.outputs            -> (OutputDiff(index=0, text="float32[4, 8]: 17/32 elements differ; ..."),)
    node, note = localise(model, (x,), {}, backend="inductor")   # the diff's first divergent node

The eager run gets copies of the inputs (an in-place op in the model must not feed the compiled
run), and the compiled run starts from the same RNG state and, for a module, the same buffers
(BatchNorm's running stats), so both see the same program state.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..core.records import dtype_name
from .report import NodeDiff

# torch.testing.assert_close's default tolerances (its documentation's table), by dtype
_TOLERANCES = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
               torch.float64: (1e-7, 1e-7), torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7)}


@dataclasses.dataclass(frozen=True)
class OutputDiff:
    index: int                # which output (a leaf of the returned structure)
    text: str                 # what differs, in one line


@dataclasses.dataclass(frozen=True)
class Mismatch:
    name: str                 # what was compiled (a function's or module's name)
    backend: str
    outputs: tuple[OutputDiff, ...]


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for k in value for leaf in _leaves(value[k])]
    return [value]


def copy_inputs(value: Any) -> Any:
    """Tensors copied (detached, same requires_grad), containers rebuilt, anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        items = [copy_inputs(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)   # a namedtuple too
    if isinstance(value, dict):
        return {k: copy_inputs(v) for k, v in value.items()}
    return value


@contextlib.contextmanager
def _same_state(fn: Any) -> Iterator[Callable[[], None]]:
    """Yields `rewind()`: back to the RNG state and buffers as they were when the block began."""
    rng = torch.get_rng_state()
    buffers = {n: b.detach().clone() for n, b in fn.named_buffers()} if isinstance(fn, torch.nn.Module) else {}

    def rewind() -> None:
        torch.set_rng_state(rng)
        with torch.no_grad():
            for name, b in fn.named_buffers() if buffers else ():
                b.copy_(buffers[name])

    yield rewind


def compare_call(fn: Callable[..., Any], args: tuple, kwargs: dict, *, compiled: Callable[..., Any], backend: str,
                 rtol: float | None = None, atol: float | None = None) -> tuple[Any, Mismatch | None]:
    """Run `fn` eagerly on copies of the inputs, then `compiled` on the inputs; compare every output."""
    with _same_state(fn) as rewind:
        eager = fn(*copy_inputs(args), **copy_inputs(kwargs))
        rewind()
        output = compiled(*args, **kwargs)
    want, got = _leaves(eager), _leaves(output)
    if len(want) != len(got):
        diffs = (OutputDiff(-1, f"eager returned {len(want)} value(s), compiled {len(got)}"),)
    else:
        diffs = tuple(OutputDiff(i, text) for i, (a, b) in enumerate(zip(want, got))
                      if (text := describe(a, b, rtol, atol)))
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return output, (Mismatch(name, backend, diffs) if diffs else None)


def describe(eager: Any, compiled: Any, rtol: float | None, atol: float | None) -> str:
    """'' when close (torch.testing's tolerances unless given), else what differs, in one line."""
    if not isinstance(eager, torch.Tensor) or not isinstance(compiled, torch.Tensor):
        return "" if type(eager) is type(compiled) and eager == compiled else f"eager {eager!r}, compiled {compiled!r}"
    kind = f"{dtype_name(eager.dtype)}{list(eager.shape)}"
    if eager.shape != compiled.shape or eager.dtype != compiled.dtype:
        return f"eager {kind}, compiled {dtype_name(compiled.dtype)}{list(compiled.shape)}"
    default = _TOLERANCES.get(eager.dtype, (0.0, 0.0))
    rtol, atol = (default[0] if rtol is None else rtol), (default[1] if atol is None else atol)
    e, c = eager.detach().cpu().double(), compiled.detach().cpu().double()
    bad = ~torch.isclose(c, e, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return ""
    diff = (c - e).abs().nan_to_num(float("inf"))
    worst = int(torch.where(bad.flatten(), diff.flatten(), -1.0).argmax())
    index = [int(i) for i in torch.unravel_index(torch.tensor(worst), e.shape)] if e.dim() else []
    big = e.abs() > atol
    rel = float((diff[big] / e.abs()[big]).max()) if big.any() else float("nan")
    return (f"{kind}: {int(bad.sum())}/{e.numel()} elements differ; max abs {float(diff.max()):.4g}, max rel "
            f"{rel:.4g} (rtol={rtol:g}, atol={atol:g}); worst at {index}: eager {float(e.flatten()[worst]):.6g}, "
            f"compiled {float(c.flatten()[worst]):.6g}")


def localise(fn: Callable[..., Any], args: tuple, kwargs: dict, *, backend: Any) -> tuple[NodeDiff | None, str]:
    """The diff's first divergent node for this call, or None and why not (best effort: never raises).

    `torch.compile` must be the real one while this runs (the diff compiles with it)."""
    from .api import diff

    try:
        report = diff(fn, *copy_inputs(args), backend=backend, ladder=False, root_cause=False, **copy_inputs(kwargs))
    except Exception as exc:
        return None, f"dynstep.diff could not run: {type(exc).__name__}: {exc}"
    if report.first_divergence is not None:
        return report.first_divergence, ""
    if any(g.fusion_dependent for g in report.graphs):
        return None, "the divergence disappears once the graph is probed (it depends on what the compiler fuses)"
    return None, "no single node of the compiled graphs diverges beyond the diff's tolerance"
