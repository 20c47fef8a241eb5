"""Reference and judgement: run an FX graph eagerly and in float64, and judge a compiled value.

The judgement is the one `torch._dynamo.utils.same(..., fp64_ref=...)` uses: a compiled value
diverges when its RMS error against the float64 reference exceeds the eager value's own RMS
error against float64 by `factor`, plus an absolute `floor`. A non-finite value where float64
is finite (or a finite value where float64 is not) always diverges.

    tol = Tolerance()                                   # factor 2 (3 for 16-bit), floor 1e-5
    m = judge(compiled, eager, fp64, tol)               # Metrics(diverged=..., error=..., ...)
    for step in Reference(gm, inputs, keep=wanted.__contains__): step.node, step.eager, step.fp64
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.fx

LOW_PRECISION = (torch.float16, torch.bfloat16)


@dataclasses.dataclass(frozen=True)
class Tolerance:
    factor: float = 2.0          # compiled error may be this many times the eager error ...
    factor_low: float = 3.0      # ... or this many for float16/bfloat16 values
    floor: float = 1e-5          # ... plus this absolute RMS floor (torch's `tol / 10`)
    rounding: float = 8.0        # errors within this many machine epsilons of the value's RMS are rounding

    def budget(self, ref_error: float, dtype: torch.dtype) -> float:
        factor = self.factor_low if dtype in LOW_PRECISION else self.factor
        return factor * ref_error + self.floor


@dataclasses.dataclass(frozen=True)
class Metrics:
    """How a compiled value compares with eager (max_abs, max_rel, cosine) and float64 (errors)."""

    diverged: bool
    error: float          # RMS of compiled - fp64
    ref_error: float      # RMS of eager - fp64
    budget: float         # the largest `error` that passes
    max_abs: float        # max |compiled - eager|
    max_rel: float        # max |compiled - eager| / |eager|
    cosine: float         # cosine similarity of compiled and eager, flattened
    new_nonfinite: int    # NaN/Inf in compiled where fp64 is finite (or the reverse)
    scale: float = math.nan   # RMS of the float64 value: what one rounding error is relative to

    @property
    def ratio(self) -> float:
        if self.ref_error == 0.0:
            return 0.0 if self.error == 0.0 else math.inf
        return self.error / self.ref_error


CHUNK = 1 << 18  # elements per step: judging streams, so its float64 temporaries stay a few MB


@dataclasses.dataclass
class _Sums:
    err2: float = 0.0
    ref2: float = 0.0
    count: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    dot: float = 0.0
    norm_a: float = 0.0
    norm_b: float = 0.0
    norm_f: float = 0.0
    bad: int = 0

    def add(self, res: torch.Tensor, ref: torch.Tensor, f64: torch.Tensor) -> None:
        fin_f, fin_r, fin_e = torch.isfinite(f64), torch.isfinite(res), torch.isfinite(ref)
        # new: a NaN/Inf in compiled that neither reference has, or a finite value where both have one
        self.bad += int((~fin_r & ~_same(res, f64) & ~_same(res, ref)).sum() + (fin_r & ~fin_f & ~fin_e).sum())
        both = fin_f & fin_r & fin_e
        if not bool(both.all()):
            res, ref, f64 = res[both], ref[both], f64[both]
        if not res.numel():
            return
        self.count += res.numel()
        self.err2 += float((res - f64).pow_(2).sum())
        self.ref2 += float((ref - f64).pow_(2).sum())
        delta = (res - ref).abs_()
        self.max_abs = max(self.max_abs, float(delta.max()))
        self.max_rel = max(self.max_rel, float(delta.div_(ref.abs().clamp_min_(1e-12)).max()))
        self.dot += float(res @ ref)
        self.norm_a += float(res @ res)
        self.norm_b += float(ref @ ref)
        self.norm_f += float(f64 @ f64)


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a == b) | (a.isnan() & b.isnan())


def judge(compiled: torch.Tensor, eager: torch.Tensor, fp64: torch.Tensor | None, tol: Tolerance) -> Metrics:
    """Judge one compiled tensor against its eager and float64 references (in bounded memory)."""
    if compiled.shape != eager.shape:
        return Metrics(True, math.inf, 0.0, 0.0, math.inf, math.inf, math.nan, 0)
    if not compiled.is_floating_point() and not compiled.is_complex():
        wrong = int((compiled.cpu() != eager.cpu()).sum())
        return Metrics(wrong > 0, float(wrong), 0.0, 0.0, float(wrong), float(wrong), math.nan, 0)
    flat = [t.detach().reshape(-1) for t in (compiled, eager, eager if fp64 is None else fp64)]
    sums = _Sums()
    for start in range(0, flat[0].numel(), CHUNK):
        res, ref, f64 = (t[start:start + CHUNK].cpu().double() for t in flat)
        sums.add(res, ref, f64)
    n = max(sums.count, 1)
    error, ref_error = math.sqrt(sums.err2 / n), math.sqrt(sums.ref2 / n)
    budget = tol.budget(ref_error, compiled.dtype)
    denom = math.sqrt(sums.norm_a) * math.sqrt(sums.norm_b)
    cosine = sums.dot / denom if denom > 0 else (1.0 if sums.norm_a == sums.norm_b else 0.0)
    return Metrics(sums.bad > 0 or error > budget, error, ref_error, budget, sums.max_abs, sums.max_rel,
                   cosine, sums.bad, math.sqrt(sums.norm_f / n))


VERDICTS = ("compiled worse", "eager worse", "rounding")


def verdict(m: Metrics, dtype: torch.dtype | None, tol: Tolerance) -> str:
    """How a value's two errors against float64 compare (torch's `same(..., fp64_ref)` standard).

    "rounding": both within their own float error (each at most `tol.rounding` epsilons of the
    value's RMS), or neither beyond the other's budget; "compiled worse": the compiled error exceeds
    the budget the eager error allows (or a new NaN/Inf); "eager worse": the eager error exceeds the
    budget the compiled error would allow. Only "compiled worse" points at the compiler."""
    if m.new_nonfinite:
        return "compiled worse"
    floating = dtype is not None and dtype.is_floating_point
    own = tol.rounding * torch.finfo(dtype).eps * m.scale if floating and math.isfinite(m.scale) else 0.0
    if m.error <= own and m.ref_error <= own:
        return "rounding"
    if m.error > m.budget:
        return "compiled worse"
    if floating and m.ref_error > tol.budget(m.error, dtype):
        return "eager worse"
    return "rounding"


def judge_value(compiled: Any, eager: Any, fp64: Any, tol: Tolerance) -> tuple[Metrics, Any]:
    """Judge a tensor, or a tuple of tensors by its worst element. Returns (metrics, value)."""
    if isinstance(compiled, torch.Tensor):
        return judge(compiled, eager, fp64 if isinstance(fp64, torch.Tensor) else None, tol), compiled
    if isinstance(compiled, (tuple, list)):
        best = None
        for i, c in enumerate(compiled):
            if not isinstance(c, torch.Tensor):
                continue
            f = fp64[i] if isinstance(fp64, (tuple, list)) else None
            m = judge(c, eager[i], f, tol)
            if best is None or (m.diverged, m.error) > (best[0].diverged, best[0].error):
                best = (m, c)
        if best is not None:
            return best
    same = compiled == eager
    return Metrics(not bool(same), 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0), compiled


def nonfinite(value: Any) -> int:
    """How many NaN/Inf a value holds (tensors, nested tuples, Python floats)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            return int((~torch.isfinite(value)).sum())
        return 0
    if isinstance(value, float):
        return 0 if math.isfinite(value) else 1
    if isinstance(value, (tuple, list)):
        return sum(nonfinite(v) for v in value)
    if isinstance(value, dict):
        return sum(nonfinite(v) for v in value.values())
    return 0


def to_fp64(value: Any) -> Any:
    """Floating tensors (and float dtypes given as arguments) become float64."""
    if isinstance(value, torch.Tensor):
        return value.detach().double() if value.is_floating_point() else value
    if isinstance(value, torch.dtype):
        return torch.float64 if value.is_floating_point else value
    if isinstance(value, (tuple, list)):
        return type(value)(to_fp64(v) for v in value)
    if isinstance(value, dict):
        return {k: to_fp64(v) for k, v in value.items()}
    return value


_LOWERING_METHODS = {"float": torch.float64, "half": torch.float64, "bfloat16": torch.float64}


def call_node(node: torch.fx.Node, gm: torch.fx.GraphModule, args: tuple, kwargs: dict, *, fp64: bool) -> Any:
    """Execute one FX node on concrete values (what `torch.fx.Interpreter` does, per node)."""
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        self_obj, *rest = args
        if fp64 and node.target in _LOWERING_METHODS:
            return self_obj.to(_LOWERING_METHODS[node.target])
        return getattr(self_obj, node.target)(*rest, **kwargs)
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        if fp64:
            raise TypeError("call_module nodes run in their own dtype")
        return module(*args, **kwargs)
    raise ValueError(f"cannot execute FX node {node.name} with op {node.op!r}")


def fetch_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


@dataclasses.dataclass
class Step:
    """One node of the float64 pass: its float64 value, and its eager value when kept."""

    node: torch.fx.Node
    eager: Any                  # None unless `keep(node)`
    fp64: Any
    fp64_exact: bool            # False when the op could not run in float64 (run at its dtype, upcast)


_IN_PLACE_OPERATORS = frozenset(getattr(operator, f"i{name}") for name in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift", "matmul"))


def in_place(n: torch.fx.Node) -> bool:
    """The node overwrites its first argument (`x += y`, `x.add_(y)`, a mutable aten op)."""
    if n.op == "call_method":
        return n.target.endswith("_") and not n.target.endswith("__")
    if n.op != "call_function":
        return False
    if n.target in _IN_PLACE_OPERATORS:
        return True
    schema = getattr(n.target, "_schema", None)
    if schema is not None and schema.is_mutable:
        return True
    name = getattr(n.target, "__name__", "")
    return name.endswith("_") and not name.endswith("__") and not name.startswith("_")


def mutates(graph: torch.fx.Graph) -> bool:
    return any(in_place(n) for n in graph.nodes)


def mutated_later(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Values a later node overwrites in place (T5's `relative_buckets += ...`): judged as they were
    when computed, so each is snapshotted there (the reference's kept value, the probed output)."""
    return {n.args[0] for n in graph.nodes if in_place(n) and n.args and isinstance(n.args[0], torch.fx.Node)}


class Reference:
    """Runs `gm` eagerly, then in float64, node by node; iterating yields the float64 pass.

    Two passes rather than side by side: each holds only its own live values (dropped at their
    last use) plus the eager values of the nodes `keep` asks for, so memory stays near an eager
    run's with float64 copies. The eager pass also finds the first node producing a NaN/Inf
    its inputs did not contain (`nan_origin`: node, nan count, inf count, value).

        ref = Reference(gm, inputs, keep=lambda n: n in wanted)
        for step in ref: ...
        ref.nan_origin

    With `last`, both passes stop after that node: judging values early in the graph then
    costs a prefix of the graph, not all of it.
    """

    def __init__(self, gm: torch.fx.GraphModule, inputs: Sequence[Any], keep: Any = None,
                 last: torch.fx.Node | None = None) -> None:
        self.gm, self.inputs, self.last = gm, list(inputs), last
        self.keep = keep or (lambda node: False)
        self.nan_origin: tuple[torch.fx.Node, Any] | None = None
        self.dtypes: dict[torch.fx.Node, Any] = {}
        # integer and boolean values (positions, buckets, masks) in their own dtype: the float64 pass
        # takes them from the eager pass, so a bucket float64 rounds differently (T5's log buckets)
        # cannot move every reference after it
        self.integers: dict[torch.fx.Node, Any] = {}
        self.overwritten = mutated_later(gm.graph)

    def __iter__(self) -> Iterator[Step]:
        overwritten = self.overwritten
        kept = {step.node: _snapshot(step.eager) if step.node in overwritten else step.eager
                for step in _run(self.gm, self.inputs, fp64=False, reference=self) if self.keep(step.node)}
        for step in _run(self.gm, self.inputs, fp64=True, reference=self):
            step.eager = kept.pop(step.node, None)
            yield step


def _run(gm: torch.fx.GraphModule, inputs: Sequence[Any], *, fp64: bool, reference: Reference) -> Iterator[Step]:
    copy_inputs = mutates(gm.graph)
    placeholders = iter(inputs)
    env: dict[torch.fx.Node, Any] = {}
    last_use = _last_uses(gm.graph)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = next(placeholders)
            value = value.clone() if copy_inputs and isinstance(value, torch.Tensor) else value
            reference.dtypes.setdefault(node, _dtypes(value))
            env[node] = value  # cast to float64 at each use: a copy lives only while an op runs
            continue
        if node.op == "get_attr":
            reference.dtypes.setdefault(node, _dtypes(fetch_attr(gm, node.target)))
            env[node] = fetch_attr(gm, node.target)
            continue
        if node.op == "output":
            break
        value, exact = _compute(node, gm, env, fp64, reference)
        env[node] = value
        step = Step(node, value if not fp64 else None, value if fp64 else None, exact)
        # drop every local reference, so a value dies at its last use and not one node later
        del value
        yield step
        del step
        if node is reference.last:
            return
        for dead in last_use.get(node, ()):
            env.pop(dead, None)


def _compute(node: torch.fx.Node, gm: torch.fx.GraphModule, env: dict[torch.fx.Node, Any], fp64: bool,
             reference: Reference) -> tuple[Any, bool]:
    """One node's value in this pass, and whether float64 was exact (False: computed in low precision)."""
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
    if not fp64:
        value = call_node(node, gm, args, kwargs, fp64=False)
        reference.dtypes[node] = _dtypes(value)
        if _integral(value):
            reference.integers[node] = _snapshot(value) if node in reference.overwritten else value
        if reference.nan_origin is None and nonfinite(value) and not nonfinite((args, kwargs)):
            reference.nan_origin = (node, value)
        return value, True
    if node in reference.integers:
        return reference.integers.pop(node), True
    try:
        return call_node(node, gm, to_fp64(args), to_fp64(kwargs), fp64=True), True
    except (RuntimeError, TypeError, NotImplementedError):  # op without a float64 kernel
        low_args, low_kwargs = torch.fx.node.map_arg(
            (node.args, node.kwargs), lambda a: _back(env[a], reference.dtypes.get(a)))
        return to_fp64(call_node(node, gm, low_args, low_kwargs, fp64=False)), False


def _integral(value: Any) -> bool:
    """An integer or boolean tensor, or a tuple holding only such tensors."""
    if isinstance(value, torch.Tensor):
        return not (value.is_floating_point() or value.is_complex())
    if isinstance(value, (tuple, list)) and value:
        return all(isinstance(v, torch.Tensor) and _integral(v) for v in value)
    return False


def _snapshot(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_snapshot(v) for v in value)
    return value


def _dtypes(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.dtype
    if isinstance(value, (tuple, list)):
        return tuple(_dtypes(v) for v in value)
    return None


def _back(value: Any, dtype: Any) -> Any:
    """A float64 value cast back to the dtype(s) the eager pass saw."""
    if isinstance(value, torch.Tensor) and isinstance(dtype, torch.dtype):
        return value.to(dtype)
    if isinstance(value, (tuple, list)) and isinstance(dtype, tuple):
        return type(value)(_back(v, d) for v, d in zip(value, dtype))
    return value


def _last_uses(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    seen: set[torch.fx.Node] = set()
    out: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in reversed(graph.nodes):
        for arg in node.all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                out.setdefault(node, []).append(arg)
    return out
