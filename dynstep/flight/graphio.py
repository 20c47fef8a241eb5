"""A Dynamo graph as JSON, and back: what a dump keeps so another process can replay one graph call.

Node by node — name, op, the call target by its qualified name (`torch.nn.functional.linear`,
`torch.ops.aten.mm.default`, `operator.getitem`), arguments (nodes, numbers, strings, dtypes, devices,
slices, nested tuples/lists/dicts) and the metadata that names a node as the user wrote it (its
`stack_trace` and module stack) — so the rebuilt graph has the same node names, modules and source
lines as the one the flight recorder probed. Constant tensors the graph reads (`get_attr`) travel with
the inputs. What cannot be written this way (a submodule call, a higher-order op holding a subgraph, an
argument of another type) is an `UnsupportedGraph` naming the node: that dump has no replay.

    data = graph_json(gm)             # plain JSON-ready data; attrs(gm) -> the get_attr tensors
    gm = graph_from_json(data, attrs) # a torch.fx.GraphModule with the same nodes
"""

from __future__ import annotations

import builtins
import importlib
import math
import operator
import re
from typing import Any

import torch
import torch.fx

from .. import _compat
from ..core.records import dtype_name


class UnsupportedGraph(ValueError):
    pass


def graph_json(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """dynstep's own nodes are left out: a pause or a probe (no user), a gradient tap (its users read its input)."""
    nodes = []
    alias: dict[str, str] = {}
    for n in gm.graph.nodes:
        if _compat.is_op_overload(n.target) and n.target.namespace == "dynstep":
            if n.users:
                alias[n.name] = alias.get(n.args[0].name, n.args[0].name)
            continue
        if n.op == "call_module":
            raise UnsupportedGraph(f"node {n.name} calls the submodule {n.target!r}")
        if n.op == "get_attr" and not isinstance(_attr(gm, str(n.target)), torch.Tensor):
            raise UnsupportedGraph(f"node {n.name} reads {n.target!r}, which is not a tensor (a subgraph?)")
        target = n.target if isinstance(n.target, str) else _target_name(n)
        stack = n.meta.get("nn_module_stack") or {}
        nodes.append({"name": n.name, "op": n.op, "target": target, "args": _enc(n.args, n, alias),
                      "kwargs": _enc(n.kwargs, n, alias),
                      "stack_trace": n.meta.get("stack_trace") or "",
                      "modules": [[str(k), _fqn(v), _type_name(v)] for k, v in stack.items()]})
    return {"nodes": nodes}


def attrs(gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    """The tensors the graph's get_attr nodes read."""
    return {str(n.target): _attr(gm, str(n.target)) for n in gm.graph.nodes if n.op == "get_attr"}


def graph_from_json(data: dict[str, Any], tensors: dict[str, torch.Tensor]) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    root = torch.nn.Module()
    for entry in data["nodes"]:
        op, target = entry["op"], entry["target"]
        if op == "get_attr":
            _set_attr(root, target, tensors[f"attr:{target}"])
        elif op in ("call_function",):
            target = resolve(target)
        args, kwargs = _dec(entry["args"], env), _dec(entry["kwargs"], env)
        node = graph.create_node(op, target, tuple(args) if op != "output" else tuple(args), kwargs, name=entry["name"])
        if entry.get("stack_trace"):
            node.meta["stack_trace"] = entry["stack_trace"]
        if entry.get("modules"):
            node.meta["nn_module_stack"] = {k: (fqn, kind) for k, fqn, kind in entry["modules"]}
        env[entry["name"]] = node
    graph.lint()
    return torch.fx.GraphModule(root, graph)


_SEGMENT = re.compile(r"_(modules|parameters|buffers)_")


def input_name(placeholder: str) -> str:
    """A Dynamo placeholder as the user names it: l_self_modules_blocks_modules_1_modules_fc_parameters_weight_
    -> blocks.1.fc.weight, l_idx_ -> idx (best effort: Dynamo's own source is not kept in the graph)."""
    name = re.sub(r"^[lg]_(self_)?", "", placeholder).removesuffix("_")
    name = re.sub(r"^(modules|parameters|buffers)_", "", name)
    return _SEGMENT.sub(".", name)


def resolve(name: str) -> Any:
    """The object a qualified name names: the longest importable module, then attributes."""
    if name.startswith("torch.ops."):
        obj: Any = torch.ops
        for part in name.split(".")[2:]:
            obj = getattr(obj, part)
        return obj
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            break
    if len(parts) == 1 and hasattr(builtins, name):
        return getattr(builtins, name)
    raise UnsupportedGraph(f"cannot find {name!r} in this process (is the package that defines it installed?)")


def _target_name(n: torch.fx.Node) -> str:
    target = n.target
    if _compat.is_op_overload(target):
        return f"torch.ops.{target}"   # "aten.mm.default"
    name = _compat.qualified_name(target)
    for module in (operator, builtins):
        if getattr(module, getattr(target, "__name__", ""), None) is target:
            name = f"{'operator' if module is operator else 'builtins'}.{target.__name__}"
    try:
        found = resolve(name)
    except UnsupportedGraph:
        found = None
    if found is not target:
        raise UnsupportedGraph(f"node {n.name} calls {target!r}, which cannot be named for another process")
    return name


def _enc(value: Any, n: torch.fx.Node, alias: dict[str, str]) -> Any:
    if isinstance(value, torch.fx.Node):
        return {"node": alias.get(value.name, value.name)}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (tuple, list)):
        items = [_enc(v, n, alias) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {"dict": [[_enc(k, n, alias), _enc(v, n, alias)] for k, v in value.items()]}
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, (torch.memory_format, torch.layout)):
        return {"torch": str(value).removeprefix("torch.")}
    if isinstance(value, slice):
        return {"slice": [_enc(value.start, n, alias), _enc(value.stop, n, alias), _enc(value.step, n, alias)]}
    if value is Ellipsis:
        return {"ellipsis": True}
    raise UnsupportedGraph(f"node {n.name} has an argument of type {type(value).__name__} ({value!r:.60})")


def _dec(value: Any, env: dict[str, torch.fx.Node]) -> Any:
    if isinstance(value, list):
        return [_dec(v, env) for v in value]
    if not isinstance(value, dict):
        return value
    if "node" in value:
        return env[value["node"]]
    if "tuple" in value:
        return tuple(_dec(v, env) for v in value["tuple"])
    if "dict" in value:
        return {_dec(k, env): _dec(v, env) for k, v in value["dict"]}
    if "float" in value:
        return float(value["float"])
    if "dtype" in value:
        return getattr(torch, value["dtype"])
    if "device" in value:
        return torch.device(value["device"])
    if "torch" in value:
        return getattr(torch, value["torch"])
    if "slice" in value:
        return slice(*(_dec(v, env) for v in value["slice"]))
    return Ellipsis


def _attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def _set_attr(root: torch.nn.Module, target: str, value: torch.Tensor) -> None:
    *path, name = target.split(".")
    module = root
    for part in path:
        if not hasattr(module, part):
            module.add_module(part, torch.nn.Module())
        module = getattr(module, part)
    module.register_buffer(name, value)


def _fqn(value: Any) -> str:
    return str(value[0]) if isinstance(value, tuple) else str(value)


def _type_name(value: Any) -> str:
    kind = value[1] if isinstance(value, tuple) and len(value) > 1 else ""
    return kind if isinstance(kind, str) else f"{getattr(kind, '__module__', '')}.{getattr(kind, '__qualname__', '')}"
