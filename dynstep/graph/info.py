"""What an FX node says about the user's program: module path, source frames, op name, value.

Works on Dynamo's torch-level graphs and on AOTAutograd's aten-level graphs, which both carry
`nn_module_stack` and `stack_trace` in `node.meta`.

    module_path(node)   -> "blocks.0.mlp"        (the path in the compiled model: graph/roots.py)
    user_frames(node)   -> (Frame("model.py", 57, "forward", "x = self.fc(x)"), ...)
    op_name(node)       -> "torch.nn.functional.layer_norm" | "aten.addmm.default" | "Tensor.transpose"
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import operator
import os
import re

import torch
import torch.fx

from .. import _compat
from . import pieces, roots

_FRAME_RE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)\n(?P<code>[^\n]*)')
_PATHS = "dynstep_module_paths"   # node.meta: {Dynamo's module name: the user's path}, set at compile
_COMPILING: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("dynstep_paths", default=None)
_TORCH_DIR = os.path.dirname(torch.__file__)
_C_ALIASES = {"torch._C._nn.": "torch.nn.functional.", "torch._C._VariableFunctions.": "torch.",
              "torch._C._linalg.": "torch.linalg.", "torch._C._special.": "torch.special.",
              "torch._C._fft.": "torch.fft."}


@dataclasses.dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str
    code: str

    @property
    def location(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


def normalize_module_path(fqn: str) -> str:
    """``L['self'].blocks[0].mlp`` -> ``blocks.0.mlp``: the name alone, without the compiled frame."""
    return roots.plain_path(fqn)


def _fqns(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    nodes = list(graph.nodes)
    return nodes + [b for n in nodes for b in body_nodes(n)]


def name_modules(gm: torch.fx.GraphModule) -> dict[str, str]:
    """While a backend compiles `gm` (Dynamo's frame at hand): every module name in it resolved to the
    user's path (graph/roots.py), kept on each node for later reads (run-time selectors, the diff)."""
    pieces.link(gm)
    found = pieces.whole_of(gm.graph)       # a piece of a split graph: selectors read the whole one
    nodes = _fqns(gm.graph) + (_fqns(found[0]) if found else [])
    names = [v[0] if isinstance(v, tuple) else str(v) for n in nodes
             for v in (n.meta.get("nn_module_stack") or {}).values()]
    paths = roots.user_paths(names)
    for n in nodes:
        n.meta[_PATHS] = paths
    return paths


@contextlib.contextmanager
def naming(gm: torch.fx.GraphModule):
    """name_modules(gm), and the same paths for the graphs compiled from it meanwhile (AOTAutograd's
    aten graphs carry Dynamo's names only)."""
    token = _COMPILING.set(name_modules(gm))
    try:
        yield
    finally:
        _COMPILING.reset(token)


def module_stack(node: torch.fx.Node) -> tuple[str, ...]:
    """Every module the node was created in, outermost first (the compiled root omitted).

    A higher-order op holding a body (torch.utils.checkpoint's region) carries no stack of its own:
    it stands for the modules its whole body ran in, the part every body node shares."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack and body_nodes(node):
        stacks = [module_stack(n) for n in body_nodes(node) if n.op == "call_function"]
        common = stacks[0] if stacks else ()
        for s in stacks[1:]:
            common = tuple(a for a, b in zip(common, s) if a == b)
        return common
    paths = node.meta.get(_PATHS) or _COMPILING.get() or {}
    out = [paths[roots.FRAME]] if paths.get(roots.FRAME) and node.op != "placeholder" else []
    for value in stack.values():
        fqn = value[0] if isinstance(value, tuple) else str(value)
        path = paths.get(fqn)
        if path is None:
            path = normalize_module_path(fqn)
        if path and path not in out:
            out.append(path)
    return tuple(out)


def body_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes of the graphs a higher-order op runs (a checkpointed region's body), else []."""
    if node.op != "call_function":
        return []
    owner = node.graph.owning_module
    out: list[torch.fx.Node] = []
    for arg in node.args:
        if isinstance(arg, torch.fx.Node) and arg.op == "get_attr" and owner is not None:
            body = getattr(owner, str(arg.target), None)
            if isinstance(body, torch.fx.GraphModule):
                out += [n for n in body.graph.nodes if n.op not in ("placeholder", "output")]
    return out


def module_path(node: torch.fx.Node) -> str:
    stack = module_stack(node)
    return stack[-1] if stack else ""


@functools.lru_cache(maxsize=4096)
def _parse_frames(stack_trace: str) -> tuple[Frame, ...]:
    frames = []
    for m in _FRAME_RE.finditer(stack_trace):
        frames.append(Frame(m.group("file"), int(m.group("line")), m.group("func").strip(),
                            m.group("code").strip()))
    return tuple(frames)


def user_frames(node: torch.fx.Node) -> tuple[Frame, ...]:
    """The user's frames that were executing when the node was created, outermost first."""
    trace = node.meta.get("stack_trace") or ""
    return tuple(f for f in _parse_frames(trace) if not f.file.startswith(_TORCH_DIR))


def graph_id(gm: torch.fx.GraphModule, compile_id: str) -> str:
    """``forward[0/0]``: the user function the graph was traced from, and Dynamo's compile id."""
    piece = pieces.piece_index(gm.graph)
    name = f"/submod_{piece}" if piece is not None else ""      # DDPOptimizer's name for the piece
    for n in gm.graph.nodes:
        frames = user_frames(n)
        if frames:
            return f"{frames[0].func}{name}[{compile_id}]"
    return f"graph{name}[{compile_id}]"


def source(node: torch.fx.Node) -> tuple[str, str]:
    """(``file:line``, text of the line) of the innermost user frame, or ("", "")."""
    frames = user_frames(node)
    if not frames:
        return "", ""
    f = frames[-1]
    return f.location, f.code


def op_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_module":
        return f"module.{node.target}"
    if node.op != "call_function":
        return node.op
    target = node.target
    if _compat.is_op(target):
        return str(target).replace("::", ".")
    name = _compat.qualified_name(target)
    for prefix, alias in _C_ALIASES.items():
        if name.startswith(prefix):
            return alias + name[len(prefix):]
    return name


def is_aten_graph(graph: torch.fx.Graph) -> bool:
    return any(_compat.is_op_overload(n.target) and n.target.namespace in ("aten", "prims")
               for n in graph.nodes if n.op == "call_function")


def example_value(node: torch.fx.Node):
    meta = node.meta
    if "example_value" in meta:
        return meta["example_value"]
    return meta.get("val")


def tensor_leaves(node: torch.fx.Node) -> list[tuple[int | None, torch.Tensor]]:
    """The tensors a node produces: [(None, t)] for a tensor, [(i, t_i), ...] for a tuple/list."""
    value = example_value(node)
    if isinstance(value, torch.Tensor):
        return [(None, value)]
    if isinstance(value, (tuple, list)):
        return [(i, v) for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
    return []


def is_value_node(node: torch.fx.Node) -> bool:
    return node.op in ("call_function", "call_method", "call_module") and not is_dynstep_node(node)


def is_dynstep_node(node: torch.fx.Node) -> bool:
    target = node.target
    return _compat.is_op_overload(target) and target.namespace == "dynstep"


_STATE_STORE = re.compile(r"^\s*[A-Za-z_][\w.]*(\.[A-Za-z_]\w*|\[[^\]]*\])\s*(?::[^=]+)?=(?!=)")


def stores_state(node: torch.fx.Node) -> bool:
    """The node's source line stores its value into an object (``self.keys = torch.cat(...)``,
    ``cache[i] = x``): Python state the program mutated, which Dynamo returns as a graph output."""
    frames = user_frames(node)
    return bool(frames) and bool(_STATE_STORE.match(frames[-1].code))


def tensor_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """A tensor node itself; for a tuple-valued node, its getitem users (where its tensors live)."""
    if isinstance(example_value(node), torch.Tensor):
        return [node]
    return [u for u in node.users if u.op == "call_function" and u.target is operator.getitem
            and isinstance(example_value(u), torch.Tensor)]
