"""`--repro DIR`: a runnable script rebuilding the smallest divergent subgraph with real inputs.

The subgraph is the first divergent node alone; its inputs are the values the compiled program
fed it (saved with safetensors, never pickle), together with the compiled result. Run, the script
recomputes the node eagerly and in float64, judges the recorded compiled value (and, when the
backend can be named or imported, a fresh compile of the subgraph), prints the verdict and
exits 1 when it diverges.

    path = write_repro(differ, node, "repro_dir")      # -> "repro_dir/repro.py"
"""

from __future__ import annotations

import os
import textwrap
from typing import Any

import torch
import torch.fx

from ..graph import info as gi
from .probed import is_tensorish

_TEMPLATE = '''"""dynstep repro: {where}
    {source_text}

Rebuilds the node alone with the inputs the compiled program fed it ({n} tensor(s) in
inputs.safetensors) and checks the compiled result against eager and float64.
    python repro.py            # exit status 1 when the divergence reproduces
"""
import math
import operator
import os
import sys

import torch
from safetensors.torch import load_file

BACKEND = {backend}
FACTOR, FLOOR = {factor!r}, {floor!r}
HERE = os.path.dirname(os.path.abspath(__file__))


class Repro(torch.nn.Module):
{code}


def rms(x):
    return float(x.double().pow(2).mean().sqrt())


def judge(label, compiled, eager, fp64):
    err, ref = rms(compiled.double() - fp64), rms(eager.double() - fp64)
    bad = not math.isfinite(err) or err > FACTOR * ref + FLOOR
    print(f"{{label}}: error vs fp64 {{err:.3g}}, eager error {{ref:.3g}}, budget {{FACTOR * ref + FLOOR:.3g}}"
          f" -> {{'DIVERGES' if bad else 'ok'}}")
    return bad


def main():
    t = load_file(os.path.join(HERE, "inputs.safetensors"))
    inputs = [t[name] for name in {names!r}]
    model = Repro()
    with torch.no_grad():
        eager = model(*inputs)
        fp64 = model(*[x.double() if x.is_floating_point() else x for x in inputs]).double()
        bad = judge("recorded compiled value", t["compiled"], eager, fp64)
        if BACKEND is not None:
            fresh = torch.compile(model, backend=BACKEND)(*inputs)
            bad = judge(f"fresh compile ({{BACKEND if isinstance(BACKEND, str) else BACKEND.__name__}})",
                        fresh, eager, fp64) or bad
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
'''


def _backend_source(backend: Any, ref: str | None) -> str:
    if isinstance(backend, str):
        return repr(backend)
    if ref:
        module, _, attr = ref.partition(":")
        return f"getattr(__import__({module!r}, fromlist=['_']), {attr!r})"
    module, qual = getattr(backend, "__module__", None), getattr(backend, "__qualname__", "")
    if module and qual and "<locals>" not in qual and module != "__main__":
        return f"__import__({module!r}, fromlist=['_']).{qual}"
    return "None  # the backend was a local callable; only the recorded compiled value is judged"


def subgraph(node: torch.fx.Node, values: dict[torch.fx.Node, Any]) -> tuple[torch.fx.GraphModule, list[str],
                                                                               list[torch.Tensor]]:
    """The node alone: one placeholder per tensor input, constants for the rest."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, Any] = {}
    names, tensors = [], []
    for arg in node.all_input_nodes:
        value = values[arg]
        if isinstance(value, torch.Tensor):
            env[arg] = graph.placeholder(arg.name)
            names.append(arg.name)
            tensors.append(value.detach().contiguous().cpu())
        else:
            env[arg] = value
    new = graph.node_copy(node, lambda a: env[a])
    graph.output(new)
    return torch.fx.GraphModule(torch.nn.Module(), graph), names, tensors


def write_repro(differ: Any, node: torch.fx.Node, directory: str) -> str:
    from safetensors.torch import save_file

    compiled = differ.capture([*(a for a in node.all_input_nodes if a in differ.pos and is_tensorish(a)), node])
    placeholders = [n for n in differ.gm.graph.nodes if n.op == "placeholder"]
    values = dict(zip(placeholders, differ.inputs))
    values.update(compiled)
    missing = [a.name for a in node.all_input_nodes if a not in values]
    if missing or node not in compiled or not isinstance(compiled[node], torch.Tensor):
        differ.notes.append(f"repro not written: the inputs {missing} of {node.name} could not be captured")
        return ""
    gm, names, tensors = subgraph(node, values)
    os.makedirs(directory, exist_ok=True)
    blobs = dict(zip(names, tensors))
    blobs["compiled"] = compiled[node].detach().contiguous().cpu()
    save_file(blobs, os.path.join(directory, "inputs.safetensors"))
    code = gm.code.replace("def forward(self, ", "def forward(self, ", 1).strip("\n")
    src, text = gi.source(node)
    script = _TEMPLATE.format(where=f"{node.name} ({gi.op_name(node)}) in {gi.module_path(node) or '-'} at {src}",
                              source_text=text, n=len(names), backend=_backend_source(differ.cfg.backend, differ.cfg.backend_ref),
                              factor=differ.cfg.tol.factor, floor=differ.cfg.tol.floor,
                              code=textwrap.indent(code, "    "), names=names)
    path = os.path.join(directory, "repro.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(script)
    return path
