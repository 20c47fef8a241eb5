"""FX, the dispatcher and effects: private torch APIs dynstep's ops and graph reading rely on."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx


def qualified_name(target: Any) -> str:
    # torch/fx/node.py: _get_qualified_name (used by FX codegen to name call targets)
    from torch.fx.node import _get_qualified_name

    try:
        return _get_qualified_name(target)
    except Exception:  # builtins without __module__ (rare): fall back to the repr
        return getattr(target, "__name__", repr(target))


def register_ordered_effect(op_name: str) -> None:
    # torch/library.py: _register_effectful_op; torch/_library/effects.py: EffectType.ORDERED.
    # An ORDERED effect keeps the op through AOTAutograd (effect tokens) and Inductor, in order.
    from torch._library.effects import EffectType

    torch.library._register_effectful_op(op_name, EffectType.ORDERED)


def is_fake(t: Any) -> bool:
    # torch/_subclasses/fake_tensor.py
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def with_effects_op() -> Any:
    # torch/_higher_order_ops/effects.py: AOTAutograd wraps every effectful op call as
    # with_effects(token, op, *args) -> (token, *results) and threads the token through the graph.
    return torch.ops.higher_order.with_effects


def has_kernel(qualname: str, dispatch_key: str) -> bool:
    # torch/_C (c10 dispatcher): _dispatch_has_kernel_for_dispatch_key
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualname, dispatch_key))


def effect_of(op: Any) -> Any:
    # torch/_higher_order_ops/effects.py: _get_effect (None when the op is not effectful)
    from torch._higher_order_ops.effects import _get_effect

    return _get_effect(op)


def print_options() -> dict[str, Any]:
    # torch/_tensor_str.py: PRINT_OPTS holds what torch.set_printoptions set (no public getter)
    return dict(torch._tensor_str.PRINT_OPTS.__dict__)


def restore_print_options(saved: dict[str, Any]) -> None:
    torch._tensor_str.PRINT_OPTS.__dict__.update(saved)


def is_op_overload(target: Any) -> bool:
    # torch/_ops.py: OpOverload (an op with a chosen overload, what AOTAutograd's graphs call)
    return isinstance(target, torch._ops.OpOverload)


def is_op(target: Any) -> bool:
    # torch/_ops.py: OpOverload or OpOverloadPacket (torch.ops.ns.op and torch.ops.ns.op.default)
    return isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))


def tree_leaves(tree: Any) -> list[Any]:
    # torch/utils/_pytree.py: tree_leaves flattens the nested outputs of an FX graph
    import torch.utils._pytree as pytree

    return pytree.tree_leaves(tree)
