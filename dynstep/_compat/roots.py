"""Where a Dynamo graph's module paths start: the frame Dynamo is compiling and the model the user compiled.

    frame = compiling_frame()            # (locals, globals, code) of Dynamo's root frame, or None
    model = compiled_model()             # what torch.compile(model) was given (OptimizedModule's _orig_mod)
    unwrap_model(ddp)                    # the user's model inside DDP / FSDP1 / OptimizedModule

Dynamo names each module in `node.meta["nn_module_stack"]` by the source it reached it through
(torch/_dynamo/variables/nn_module.py: record_nn_module_stack writes `source.name`), relative to the
variables of the frame it compiles: `L['self'].layers.0`, `L['args'][0].model` (a `*args` wrapper),
`L['fn'].args[0]` (a functools.partial), `L['self'].__dict__['_modules']['base_model']` (PEFT). Read
against that frame's real values the way Dynamo itself resolves sources (torch/_dynamo/output_graph.py:
OutputGraph resolves a Source with `{"G": root_tx.f_globals, "L": root_tx.f_locals}`), each names a
module object, whose path in the compiled model is the path the user writes.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

# fully qualified wrappers and the attribute holding the user's module (named_modules() shows the
# attribute as a path component, state dicts and users do not)
_WRAPPERS = (("torch._dynamo.eval_frame", "OptimizedModule", "_orig_mod"),
             ("torch.nn.parallel.distributed", "DistributedDataParallel", "module"),
             ("torch.distributed.fsdp.fully_sharded_data_parallel", "FullyShardedDataParallel", "_fsdp_wrapped_module"),
             ("torch.distributed.algorithms._checkpoint.checkpoint_wrapper", "ActivationWrapper",
              "_checkpoint_wrapped_module"))
# the wrappers' own path components, never a user's name (DDP's `module` may be one: left alone)
WRAPPER_ATTRIBUTES = frozenset(attr for _, _, attr in _WRAPPERS if attr.startswith("_"))


@dataclasses.dataclass(frozen=True)
class RootFrame:
    """The frame Dynamo compiles: its real locals and globals, and its code (parameter kinds)."""

    f_locals: dict[str, Any]
    f_globals: dict[str, Any]
    code: types.CodeType

    @property
    def varargs(self) -> str | None:
        if not self.code.co_flags & 0x04:   # CO_VARARGS
            return None
        return self.code.co_varnames[self.code.co_argcount + self.code.co_kwonlyargcount]

    @property
    def first_argument(self) -> Any:
        """The frame's first positional argument (a method's self, a `*args` wrapper's args[0]), or None."""
        if self.code.co_argcount:
            return self.f_locals.get(self.code.co_varnames[0])
        args = self.f_locals.get(self.varargs) if self.varargs else None
        return args[0] if isinstance(args, tuple) and args else None


def compiling_frame() -> RootFrame | None:
    """Dynamo's root frame while it compiles one (a backend runs inside it), else None."""
    # torch/_dynamo/symbolic_convert.py: InstructionTranslator.current_tx() is set while Dynamo traces
    # and compiles a frame (convert_frame.py: tracer.set_current_tx()); torch/_dynamo/output_graph.py:
    # OutputGraph.root_tx is the frame's translator, whose f_locals/f_globals are the frame's real values.
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
        root = tx.output.root_tx
        return RootFrame(dict(root.f_locals), root.f_globals, root.f_code)
    except (AttributeError, ImportError):
        return None


def dynamo_graph() -> Any:
    """The whole FX graph of the frame Dynamo is compiling, or None. A backend given a piece of it
    (DDPOptimizer, torch/_dynamo/backends/distributed.py, splits it with torch/fx/passes/split_module.py,
    which gives each piece's node a shallow copy of the original node's meta) can find it here:
    torch/_dynamo/output_graph.py compiles `OutputGraph.graph` as the GraphModule it hands on."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        return InstructionTranslator.current_tx().output.graph
    except (AttributeError, ImportError):
        return None


def _wrapper_attribute(obj: Any) -> str | None:
    for module, name, attr in _WRAPPERS:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(obj, cls):
            return attr
    return None


def unwrap_model(obj: Any) -> Any:
    """The user's module inside torch.compile's OptimizedModule, DDP, FSDP1 and checkpoint wrappers."""
    seen = 0
    while seen < 8 and (attr := _wrapper_attribute(obj)) is not None:
        obj = getattr(obj, attr)
        seen += 1
    return obj


def compiled_model() -> Any:
    """The module given to torch.compile whose call is running now (the innermost on the stack), or None.

    torch/_dynamo/eval_frame.py: torch.compile(module) returns an OptimizedModule holding the module as
    `_orig_mod`; its frames are on the stack below every frame Dynamo compiles during the call, also
    frames it reaches after graph breaks (FSDP2's per-module hooks, DDP's forward)."""
    from torch._dynamo.eval_frame import OptimizedModule

    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, OptimizedModule):
            return owner._orig_mod
        frame = frame.f_back
    return None



def running_compile() -> Any:
    """The torch.compile call whose compiled code is running now (the innermost), or None.

    torch/_dynamo/eval_frame.py: each torch.compile call makes one OptimizeContext (a
    _TorchDynamoContext); calls into the compiled function or module go through its
    `compile_wrapper`, whose closure holds it as `self`. Graphs Dynamo reuses from its cache for a
    second torch.compile call with equal options still run under that second call's context."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "compile_wrapper" and code.co_filename.endswith("eval_frame.py"):
            owner = frame.f_locals.get("self")
            if owner is not None:
                return owner
        frame = frame.f_back
    return None
