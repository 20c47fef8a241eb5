"""The layout's rules, checked on the source (docs/architecture.md states them):

1. no import cycle, no engine module importing a front end, rich only in front ends (the check
   `python ../shared/tools/imports.py` makes, function-level imports counted); counting the imports
   under `if TYPE_CHECKING:` too, no cycle but the ones listed in TYPE_ONLY_CYCLES;
2. every private torch API (``torch._*``, ``torch.utils._*``) only in `dynstep._compat`;
3. modules under 400 lines, functions under 40;
4. rooms depend downwards: each room imports only the rooms (or the few modules) its row of `ROOMS` allows.

A front end is a module with a part named front, cli, repl, console, frontends, show, html, runner,
doctor, demo or __main__ in its dotted name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"dynstep": ROOT / "dynstep", "dynstep.backends": ROOT / "backends"}
FRONT_PARTS = {"front", "cli", "repl", "console", "frontends", "show", "html", "runner", "doctor", "demo", "__main__"}


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("").parts
            parts = rel[:-1] if rel[-1] == "__init__" else rel
            out[".".join((pkg, *parts))] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines |= {n.lineno for sub in node.body for n in ast.walk(sub) if hasattr(n, "lineno")}
    return lines


def imports_of(name: str, path: Path, known: set[str], type_only: bool = False) -> tuple[set[str], bool]:
    """Modules of the package `name` imports (anywhere in the file; with `type_only` also under
    `if TYPE_CHECKING:`), and whether it imports rich."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if type_only else _type_checking_lines(tree)
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found, uses_rich = set(), False
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            uses_rich |= t == "rich" or t.startswith("rich.")
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found, uses_rich


def import_graph(type_only: bool = False) -> tuple[dict[str, set[str]], set[str]]:
    mods = modules()
    graph, rich_users = {}, set()
    for name, path in mods.items():
        deps, uses_rich = imports_of(name, path, set(mods), type_only)
        # importing a submodule runs its package's __init__ too, but that face alone is no design edge
        graph[name] = {d for d in deps if not (mods[d].name == "__init__.py" and name.startswith(d + "."))}
        if uses_rich:
            rich_users.add(name)
    return graph, rich_users


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def is_front(name: str) -> bool:
    return bool(set(name.split(".")) & FRONT_PARTS)


def test_no_import_cycles():
    graph, _ = import_graph()
    assert cycles(graph) == []


# Cycles that close only through imports under `if TYPE_CHECKING:`. They never run, but a reader and a
# type checker follow them as any other edge: a room that names an upper room's types for its
# annotations depends on it. Each is to go (issue 27); the test fails on a new one, and on a listed
# one that is gone (take it off the list).
TYPE_ONLY_CYCLES: list[list[str]] = []   # issue 27: the last three went (Stop in core; protocols for the rest)


def test_import_cycles_counting_type_only_imports_are_only_the_listed_ones():
    graph, _ = import_graph(type_only=True)
    found = sorted(cycles(graph))
    assert [c for c in found if c not in TYPE_ONLY_CYCLES] == [], "a new import cycle through TYPE_CHECKING imports"
    assert [c for c in TYPE_ONLY_CYCLES if c not in found] == [], "a listed cycle is gone: take it off TYPE_ONLY_CYCLES"
    assert not any(m.startswith(("dynstep.core.", "dynstep.dap.")) for c in found for m in c)


def test_type_only_imports_are_counted_when_asked(tmp_path):
    """An import under `if TYPE_CHECKING:` is an edge for the type-only check and none for the other."""
    path = tmp_path / "m.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dynstep.core import events\n")
    known = {"dynstep.core.events", "m"}
    assert imports_of("m", path, known) == (set(), False)
    assert imports_of("m", path, known, type_only=True) == ({"dynstep.core.events"}, False)


def test_the_engine_never_imports_a_front_end_and_only_front_ends_use_rich():
    graph, rich_users = import_graph()
    leaks = [f"{a} -> {b}" for a, deps in graph.items() if not is_front(a) for b in deps if is_front(b)]
    assert leaks == []
    assert sorted(m for m in rich_users if not is_front(m)) == []


def test_the_checks_find_what_they_look_for():
    """The rules above would fail on a cycle or a leak (so they cannot pass vacuously)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph, _ = import_graph()
    assert len(graph) > 60 and graph["dynstep.front.cli"] and is_front("dynstep.front.cli")
    assert "dynstep.core.events" in graph["dynstep.probe.runtime"]


# Rule 4, rooms depend downwards: what each room's modules may import besides their own room (a room,
# or one module by its full name where a room reaches into one module of a room above it). A new room
# goes in here, placed on purpose (docs/architecture.md, "Dependency rules").
_BELOW_PROBE = {"core", "_compat", "graph", "ops", "mixed", "jobs", "compilers", "recording", "report", "stages"}
ROOMS: dict[str, set[str]] = {
    "_compat": set(),
    "core": set(),
    "graph": {"core", "_compat"},
    "ops": {"core", "_compat"},
    "mixed": {"core", "_compat"},
    "jobs": {"core", "_compat"},
    "compilers": {"core", "_compat"},
    # the recording format, the compile log it keeps and its collector on torch's structured trace
    "recording": {"core", "_compat", "graph", "jobs"},
    "report": {"core", "_compat", "graph", "jobs", "recording"},
    # every stage of a compile; the bytecode stepper's standard-library modules (no stepper)
    "stages": {"core", "_compat", "mixed", "dynstep.bytecode.code", "dynstep.bytecode.decompile",
               "dynstep.bytecode.replay"},
    "probe": _BELOW_PROBE,
    "crossrun": {"core", "graph", "recording"},
    "step": _BELOW_PROBE | {"probe"},
    "bytecode": _BELOW_PROBE | {"probe", "step", "dynstep.backends.superstep"},
    "dap": _BELOW_PROBE | {"probe", "step", "bytecode"},
    "eagerdiff": {"core", "_compat", "graph", "compilers"},
    "flight": _BELOW_PROBE | {"probe", "eagerdiff", "dynstep.backends.superstep"},
    "backends": _BELOW_PROBE | {"probe", "step", "dap", "eagerdiff", "flight"},
}
FACES = {"front", "__main__", "fastpath", ""}   # front ends and the package's public face: anything engine


def room_of(module: str) -> str:
    parts = module.split(".")
    return "" if len(parts) == 1 else ("backends" if parts[1] == "backends" else parts[1])


def room_leaks(graph: dict[str, set[str]], rooms: dict[str, set[str]]) -> list[str]:
    """Edges from a room to what its row does not allow (a room not in `rooms` and no face: listed too)."""
    out = []
    for a, deps in sorted(graph.items()):
        here = room_of(a)
        if here in FACES:
            continue
        if here not in rooms:
            out.append(f"{a}: room {here!r} is not placed in ROOMS")
            continue
        allowed = rooms[here]
        out += [f"{a} -> {d}" for d in sorted(deps)
                if room_of(d) != here and room_of(d) not in allowed and d not in allowed]
    return out


def test_rooms_depend_downwards():
    graph, _ = import_graph()
    assert room_leaks(graph, ROOMS) == []


def test_the_room_rule_finds_what_it_looks_for():
    """The recording room sits below probe and report: an import of either from it is a leak."""
    graph = {"dynstep.recording.storage": {"dynstep.probe.sessions", "dynstep.recording.compile_log"},
             "dynstep.recording.reader": {"dynstep.report.model"}, "dynstep.newroom.x": set()}
    assert room_leaks(graph, ROOMS) == ["dynstep.newroom.x: room 'newroom' is not placed in ROOMS",
                                        "dynstep.recording.reader -> dynstep.report.model",
                                        "dynstep.recording.storage -> dynstep.probe.sessions"]


def _private_torch(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _private_path(node.module):
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(_private_path(a.name) for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if _dotted(node.value).split(".")[0] == "torch":
                lines.append(node.lineno)
    return lines


def _private_path(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "torch" and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def test_private_torch_apis_only_in_compat():
    offenders = {name: lines for name, path in modules().items() if not name.startswith("dynstep._compat")
                 for lines in [_private_torch(ast.parse(path.read_text(encoding="utf-8")))] if lines}
    assert offenders == {}
    assert _private_torch(ast.parse("import torch._dynamo\nx = torch._C.foo\nfrom torch._guards import G"))


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_and_functions_stay_small(name):
    path = modules()[name]
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") <= 400, f"{path} has {text.count(chr(10))} lines (rule: under 400)"
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 40]
    assert long == [], f"{path}: functions over 40 lines: {long}"


_STEPPER_NAMES = ("STEPPER", "stepper")
_MUTATORS = ("add", "clear", "update", "append", "discard", "pop", "remove", "extend", "setdefault")


def _stepper_writes(tree: ast.AST) -> list[int]:
    """Lines that assign to a stepper's field (`STEPPER.mode = ...`, `self.stepper.x += 1`) or change a
    field's contents in place (`stepper.hits.clear()`)."""
    def names_stepper(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and _dotted(node.value).split(".")[-1] in _STEPPER_NAMES

    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for leaf in (t.elts if isinstance(t, ast.Tuple) else [t]):
                while isinstance(leaf, ast.Subscript):
                    leaf = leaf.value
                if names_stepper(leaf):
                    lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS \
                and names_stepper(node.func.value):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_the_stepper_state_is_written_only_inside_step():
    """Issue 27 item 1: the stepper owns its state; other rooms call its methods (`resume`, `detach`,
    `serve_everywhere`, `share_front`, `use_coordinator`, `assign`, `configure`)."""
    outside = {name: path for name, path in modules().items() if not name.startswith("dynstep.step.")}
    found = {name: lines for name, path in sorted(outside.items())
             if (lines := _stepper_writes(ast.parse(path.read_text(encoding="utf-8"))))}
    assert found == {}


def test_the_stepper_write_rule_finds_what_it_looks_for():
    code = ("STEPPER.mode = 'run'\nSTEPPER.config, STEPPER.frontend = 1, 2\nself.stepper.hits[3] += 1\n"
            "stepper.watches.append('x')\nSTEPPER.resume('step')\nmode = STEPPER.mode\n")
    assert _stepper_writes(ast.parse(code)) == [1, 2, 3, 4]


# Modules that may rebind their own module-level names (`global`): each holds a flag or entry point that
# generated code or a hot path reads as a module attribute, or a front end's process-wide choice. The probe
# kernels' state is one object (probe.runtime.RUNTIME, issue 27 item 4): runtime.py and rings.py are not
# here. A module joins this list only with a reason; the list only shrinks.
GLOBAL_WRITERS = {
    "dynstep.core.wiring",          # the default event sink and front end slots
    "dynstep.probe.switch",         # ENABLED: read by generated wrappers
    "dynstep.probe.fastpath",       # probe/publish entry points Inductor's wrapper calls
    "dynstep.dap.api",              # the one in-process DAP server
    "dynstep.jobs.identity",        # rank and world, found once
    "dynstep.flight.recorder",      # the process's flight recorder
    "dynstep._compat.native",       # torch's native entry points, looked up once
    "dynstep.ops.native",           # the loaded native extension
    "dynstep.mixed.provenance",     # Inductor provenance cache
    "dynstep.front.repl",           # readline history set-up
    "dynstep.front.console",        # the rich console
    "dynstep.bytecode.framestack",  # the loaded value-stack reader
    "dynstep.bytecode.api",         # the active bytecode stepper
    "dynstep.backends.kernel_counts",   # how many measure() blocks force kernel counting now
}


def _global_statements(tree: ast.AST) -> list[int]:
    return sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Global))


def test_module_state_is_rebound_only_in_the_listed_modules():
    found = {name for name, path in modules().items()
             if _global_statements(ast.parse(path.read_text(encoding="utf-8")))}
    assert found <= GLOBAL_WRITERS, f"`global` outside the listed modules: {sorted(found - GLOBAL_WRITERS)}"
    assert {"dynstep.probe.runtime", "dynstep.probe.rings"}.isdisjoint(found)


def test_the_global_rule_finds_what_it_looks_for():
    assert _global_statements(ast.parse("x = 1\ndef f():\n    global x\n    x = 2\n")) == [3]
