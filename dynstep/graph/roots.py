"""Module paths as the user writes them, from the sources Dynamo records in `nn_module_stack`.

Dynamo names a module by how it reached it from the frame it compiles: `L['self'].blocks[0].mlp`, or
through a decorator's `*args` (`L['args'][0].model`), a functools.partial (`L['fn'].args[0]`), an
accelerate hook (`L['module']`, `....layers.0._old_forward.__self__.lin`), PEFT (`.__dict__['_modules']`),
DDP's forward (`L['self'].module.0`). While the frame is being compiled its real values are at hand:
each name is resolved to the module object, and the object's path in the compiled model
(`model.named_modules()`, wrappers such as DDP's `module.` left out) is what the user writes. A
name that cannot be resolved (no compile in progress, a module outside the model) falls back to the
name itself with the frame variable it starts from dropped.

    paths = user_paths(["L['args'][0].model.layers[0]"])   # {"L['args'][0].model.layers[0]": "model.layers.0"}
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

import torch

from .. import _compat
from .._compat.roots import WRAPPER_ATTRIBUTES, RootFrame

_BASE = re.compile(r"^(L|G)\[(['\"])(.+?)\2\]")
_HOP = re.compile(r"\.([A-Za-z_]\w*|\d+)|\[(-?\d+)\]|\[(['\"])(.*?)\3\]")
_BINDING = ("__self__", "__func__", "__wrapped__")   # a bound method's object, a wrapper's function


def parse(fqn: str) -> tuple[tuple[str, str] | None, list[str | int]]:
    """``L['args'][0].model.layers.0`` -> (("L", "args"), [0, "model", "layers", "0"]); base None if unknown."""
    m = _BASE.match(fqn)
    base = (m.group(1), m.group(3)) if m else None
    rest = fqn[m.end():] if m else fqn
    hops: list[str | int] = []
    pos = 0
    for hop in _HOP.finditer(rest):
        if hop.start() != pos:
            return None, []
        pos = hop.end()
        if hop.group(1) is not None:
            hops.append(hop.group(1))
        elif hop.group(2) is not None:
            hops.append(int(hop.group(2)))
        else:
            hops.append(hop.group(4))
    return (base, hops) if pos == len(rest) else (None, [])


def plain_path(fqn: str, frame: RootFrame | None = None) -> str:
    """The name with the frame variable it starts from dropped, and Dynamo's bookkeeping hops (no values
    needed): ``L['self'].__dict__['_modules']['base_model'].layers[0]`` -> ``base_model.layers.0``. The
    variable includes how a wrapper passed it: an element of the frame's ``*args``, a partial's
    ``.args[0]``, a bound method's ``.__self__``."""
    base, hops = parse(fqn)
    if base is None:
        return fqn.strip(".")
    hops = hops[_root_hops(base, hops, frame):]
    out: list[str] = []
    skip = 0
    for i, hop in enumerate(hops):
        if skip:
            skip -= 1
        elif hop == "__dict__" and i + 1 < len(hops) and hops[i + 1] == "_modules":
            skip = 1
        elif hop in ("_modules", "_parameters", "_buffers") or hop in WRAPPER_ATTRIBUTES:
            continue
        elif hop == "__self__" and out:
            out.pop()                        # `layers.0._old_forward.__self__` is layers.0 itself
        elif hop not in _BINDING:
            out.append(str(hop))
    return ".".join(out)


def _root_hops(base: tuple[str, str], hops: list[str | int], frame: RootFrame | None) -> int:
    """How many hops after the frame variable still name the root: `[0]` of the frame's `*args`, then
    a partial's `.args[i]` / `.func`, a bound method's `.__self__`, a wrapper's `.__wrapped__`."""
    i = 0
    if frame is not None and base == ("L", frame.varargs) and hops and isinstance(hops[0], int):
        i = 1
    while i < len(hops):
        if hops[i] in _BINDING or hops[i] == "func":
            i += 1
        elif i + 1 < len(hops) and ((hops[i] == "args" and isinstance(hops[i + 1], int)) or hops[i] == "keywords"):
            i += 2
        else:
            break
    return i


FRAME = ""    # user_paths()[FRAME]: the path of the module whose forward is the compiled frame itself


def user_paths(fqns: Iterable[str]) -> dict[str, str]:
    """Each name's path in the model being compiled (resolved against Dynamo's frame), else plain_path.

    Under FSDP2's hooks (or a graph break inside a block) Dynamo compiles a submodule's forward as a
    frame of its own: the values of that graph are inside that submodule (`FRAME`: `layers.0`)."""
    fqns = list(dict.fromkeys(fqns))
    frame = _compat.compiling_frame()
    model = _root_model(frame)
    names = _names(model) if model is not None else {}
    out = {FRAME: _frame_module(frame, names)}
    for fqn in fqns:
        obj = _resolve(fqn, frame) if frame is not None and names else None
        found = names.get(id(obj)) if isinstance(obj, torch.nn.Module) else None
        out[fqn] = found if found is not None else plain_path(fqn, frame)
    return out


def _frame_module(frame: RootFrame | None, names: dict[int, str]) -> str:
    """The path of the submodule whose forward (or a resume function of it) Dynamo compiles, or ""."""
    if frame is None or not names:
        return ""
    own = frame.f_locals.get("self")
    if not isinstance(own, torch.nn.Module):
        own = frame.first_argument
    return names.get(id(own), "") if isinstance(own, torch.nn.Module) else ""


def _root_model(frame: RootFrame | None) -> torch.nn.Module | None:
    """What torch.compile was given (under DDP/FSDP: the user's model), else the frame's own module
    (torch.compile(model.forward), a decorated or partial-bound forward)."""
    model = _compat.compiled_model()
    if model is None and frame is not None:
        model = frame.first_argument
        if isinstance(model, functools.partial) and model.args:
            model = model.args[0]
        model = getattr(model, "__self__", model)
    model = _compat.unwrap_model(model)
    return model if isinstance(model, torch.nn.Module) else None


def _names(model: torch.nn.Module) -> dict[int, str]:
    """id(module) -> its path in `model`, wrapper components left out (read at each compile: a model
    may gain modules between compiles)."""
    out: dict[int, str] = {}
    for name, mod in model.named_modules(remove_duplicate=False):
        out.setdefault(id(mod), ".".join(p for p in name.split(".") if p and p not in WRAPPER_ATTRIBUTES))
    return out


def _resolve(fqn: str, frame: RootFrame) -> Any:
    base, hops = parse(fqn)
    if base is None:
        return None
    scope = frame.f_locals if base[0] == "L" else frame.f_globals
    if base[1] not in scope:
        return None
    obj = scope[base[1]]
    for hop in hops:
        try:
            obj = _step(obj, hop)
        except (AttributeError, KeyError, IndexError, TypeError):
            return None
    return obj


def _step(obj: Any, hop: str | int) -> Any:
    if isinstance(obj, torch.nn.Module) and isinstance(hop, str) and hop in obj._modules:
        return obj._modules[hop]
    if isinstance(hop, int) or (isinstance(obj, dict) and hop in obj):
        return obj[hop]
    return getattr(obj, hop)
