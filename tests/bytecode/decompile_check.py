"""dynstep's decompiler on the shapes Dynamo writes, under any CPython 3.11+ with the standard library only:

    python3.13 tests/bytecode/decompile_check.py     # prints one JSON object: {"checks": {...}, ...}

It loads dynstep/bytecode/decompile*.py as a package of their own (no torch, no dynstep install),
decompiles functions written in the shapes of Dynamo's output (a graph call, side-effect replay
with ``dict.update`` / slice stores / attribute stores, calls with ``*args``/``**kwargs`` and
keywords, stack shuffles, a data-dependent ``if`` that returns one resume call or another), runs
the decompiled source in place of each function, and compares what both return and change.
test_decompile.py runs it in-process and in a subprocess for every other Python it finds.
"""

from __future__ import annotations

import copy
import importlib
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load() -> types.ModuleType:
    """dynstep/bytecode/decompile.py, imported inside a stand-in package (its __init__ needs torch)."""
    name = "_dynstep_decompile_check"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(ROOT / "dynstep" / "bytecode")]
        sys.modules[name] = package
    return importlib.import_module(f"{name}.decompile")


def __compiled_fn_1(x):
    return (x * 2, x + 1)


def __resume_at_1(*args, **kwargs):
    return ("resume 1", args, sorted(kwargs.items()))


def __resume_at_2(*args, **kwargs):
    return ("resume 2", args, sorted(kwargs.items()))


class Box:
    count = 0


def replay(x, d, log, obj):
    graph_out_0 = __compiled_fn_1(x)
    d.update({"y": graph_out_0[1], "n": 3})
    log[:] = ["before", graph_out_0[0]]
    obj.count = graph_out_0[0]
    del log[0]
    tmp = graph_out_0
    del graph_out_0
    return __resume_at_1(*[d, log], tmp[1], k=1, **{"z": 2})


def branch(x, flag):
    y = __compiled_fn_1(x)
    if y[0] > 4:
        return __resume_at_1(y[1], flag=flag)
    return __resume_at_2(y, not flag)


def shuffle(x, d, obj):
    a, b = __compiled_fn_1(x)
    a, b = b, a
    d["k"] += a
    obj.count += b
    first = second = [a, b][1:]
    first.append(x)
    return __resume_at_2(first, second, -a, a is b, a in first, x // 2)


CASES = {
    "replay": (replay, lambda: (3, {"k": 0}, [9], Box())),
    "branch (if taken)": (branch, lambda: (3, True)),
    "branch (else)": (branch, lambda: (1, False)),
    "shuffle": (shuffle, lambda: (3, {"k": 1}, Box())),
}


def observe(fn, args):
    """What `fn` returns and what it leaves in its arguments."""
    out = fn(*args)
    return repr((out, [vars(a) if isinstance(a, Box) else a for a in args]))


def run_checks(decompile_module: types.ModuleType) -> dict:
    checks: dict[str, tuple[bool, str]] = {}
    for label, (fn, make_args) in CASES.items():
        try:
            made = decompile_module.decompile(fn.__code__, title=f"{fn.__name__} (check)")
            namespace = dict(globals())
            exec(compile(made.source, f"<decompiled {fn.__name__}>", "exec"), namespace)
            args = make_args()
            want, got = observe(fn, copy.deepcopy(args)), observe(namespace[fn.__name__], copy.deepcopy(args))
            checks[label] = (want == got, f"original {want}; decompiled {got}\n{made.source}")
        except Exception as exc:      # a failing case is a failed check with its reason, not a crash
            checks[label] = (False, f"{type(exc).__name__}: {exc}")
    try:
        decompile_module.decompile(_a_loop.__code__)
        checks["a loop is refused by name"] = (False, "no error")
    except decompile_module.DecompileError as exc:
        checks["a loop is refused by name"] = ("backward jump" in str(exc) or "FOR_ITER" in str(exc)
                                               or "GET_ITER" in str(exc), str(exc))
    try:
        decompile_module.decompile(_a_ternary.__code__)
        checks["an if-expression is refused by name"] = (False, "no error")
    except decompile_module.DecompileError as exc:
        checks["an if-expression is refused by name"] = ("does not end in a return" in str(exc), str(exc))
    return {"checks": checks}


def _a_ternary(x):
    y = x // 2 if x else 0
    return abs(y) + x


def _a_loop(xs):
    total = 0
    for x in xs:
        total += x
    return total


def main() -> int:
    report = run_checks(load())
    report["python"] = ".".join(map(str, sys.version_info[:3]))
    print(json.dumps(report))
    return 0 if all(ok for ok, _ in report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
