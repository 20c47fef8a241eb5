"""Issue 30 item 2: readable Python of the code Dynamo writes, without depyf, on Python 3.11-3.13.

The strongest check a decompiler can pass: the decompiled source, run in place of the code object,
does what the code object does. Here on the real output of torch.compile (the transformed function
with side-effect replay and a graph break, a data-dependent `if`, a `with` block, a module attribute
update), and on hand-written Dynamo shapes under every CPython 3.11-3.13 found (decompile_check.py,
standard library only)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from dynstep import _compat
from dynstep.bytecode.decompile import DecompileError, decompile

from . import decompile_check
from .test_framestack import find_python

HERE = sys.version_info[:2]
OTHERS = [v for v in ((3, 11), (3, 12), (3, 13)) if v != HERE]


def story(x, d, log):
    y = torch.sin(x) * 2
    d["y"] = y.sum()
    log.append("before break")
    print("graph break")
    z = torch.cos(y) + 1
    log.append(z.shape[0])
    return z


def branches(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def with_block(x):
    with torch.no_grad():
        y = x * 2
        print("graph break inside with")
        z = y + 1
    return z


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.count = 0

    def forward(self, x):
        self.count += 1
        return self.lin(x).relu()


def _args(fn):
    return {story: (torch.tensor([1.0, 2.0]), {}, []), branches: (torch.tensor([-3.0, 1.0]),),
            with_block: (torch.ones(2),)}.get(fn)


def _transformed(fn):
    torch._dynamo.reset()
    torch.compile(fn, backend="eager")(*copy.deepcopy(_args(fn)))
    code = getattr(fn, "__code__", None) or fn.forward.__code__
    return next(c for c in _compat.dynamo_output_codes() if _compat.original_code(c) is code)


@pytest.mark.parametrize("fn", [story, branches, with_block], ids=lambda f: f.__name__)
def test_decompiled_dynamo_output_runs_like_the_code_object(fn, capsys):
    code = _transformed(fn)
    made = decompile(code, title="check")
    assert "NULL" not in made.source and "<self>" not in made.source and "__compiled_fn" in made.source
    namespace = dict(fn.__globals__)               # Dynamo put __compiled_fn_*, __resume_at_* there
    exec(compile(made.source, "<decompiled>", "exec"), namespace)
    args = _args(fn)
    run = torch.compiler.disable(lambda f, a: f(*a))   # plain CPython runs both, not Dynamo
    want_args, got_args = copy.deepcopy(args), copy.deepcopy(args)
    want = run(types.FunctionType(code, fn.__globals__), want_args)       # the code object itself
    got = run(namespace[code.co_name], got_args)
    assert torch.equal(want, got) and repr(want_args) == repr(got_args)


def test_a_module_attribute_update_reads_as_python():
    torch._dynamo.reset()
    model = Counter()
    torch.compile(model, backend="eager")(torch.ones(2))
    code = next(c for c in _compat.dynamo_output_codes() if _compat.original_code(c) is Counter.forward.__code__)
    source = decompile(code).source
    assert "(self, 'count', 1)" in source
    # the submodule as Dynamo loads it: through __dict__ (torch >= 2.12) or the attribute (torch 2.11)
    assert "self.__dict__['_modules']['lin']" in source or "self._modules['lin']" in source
    assert source.splitlines()[-1].strip().startswith("return ")


def test_the_decompiler_reads_dynamo_shapes_on_this_python():
    report = decompile_check.run_checks(decompile_check.load())
    assert [f"{k}: {d}" for k, (ok, d) in report["checks"].items() if not ok] == []


@pytest.mark.parametrize("version", OTHERS, ids=[f"{a}.{b}" for a, b in OTHERS])
def test_the_decompiler_reads_dynamo_shapes_on_another_python(version):
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} interpreter here (set DYNSTEP_TEST_PYTHONS to one)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([python, str(Path(decompile_check.__file__))], capture_output=True, text=True, env=env,
                          timeout=120)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["python"].startswith(f"{version[0]}.{version[1]}.")
    assert [f"{k}: {d}" for k, (ok, d) in report["checks"].items() if not ok] == [], proc.stderr
    assert proc.returncode == 0


def test_a_shape_it_does_not_read_is_named_not_guessed():
    def loop(xs):
        total = 0
        for x in xs:
            total += x
        return total

    with pytest.raises(DecompileError, match=r"#\d+ \[\d+\] (FOR_ITER|GET_ITER|JUMP_BACKWARD).*not a shape Dynamo writes"):
        decompile(loop.__code__)
