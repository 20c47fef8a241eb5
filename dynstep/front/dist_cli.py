"""`dynstep run` for distributed jobs: ``--ranks``, and a launcher as the target.

    dynstep run --pause "module:layers.1" --ranks 1 -m torch.distributed.run --nproc-per-node 2 train.py
    dynstep run --ranks all torchrun --nproc-per-node 2 train.py        (the torchrun script works too)

torchrun starts its workers as new processes, so patching `torch.compile` in this process would
reach none of them. Instead the launcher runs here with its training script replaced by
``python -m dynstep run TRAINING_SCRIPT ...``, and every option travels to the workers in the
environment (DYNSTEP_PAUSE, DYNSTEP_RANKS, ...), where superstep reads it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")
_LISTS = ("probe", "pause")
_VALUES = ("commands", "frontend", "inner", "nan")


def add_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--ranks", default=None, metavar="0|1,3|all",
                     help="in a distributed job: the ranks that pause (default 0); the others wait")


def overrides_with_ranks(args: argparse.Namespace, overrides: dict[str, object]) -> dict[str, object]:
    if getattr(args, "ranks", None) is not None:
        return {**overrides, "ranks": args.ranks}
    return overrides


def split_launcher(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """`dynstep run [options] -m torch.distributed.run|torchrun LAUNCHER ARGS`: the part dynstep
    parses, and the launcher's own arguments (None when the target is no launcher)."""
    argv = list(argv)
    if not argv or argv[0] != "run":
        return argv, None
    for i, word in enumerate(argv[1:], 1):
        if word == "-m" and i + 1 < len(argv) and argv[i + 1] in LAUNCHERS:
            return argv[:i + 2], argv[i + 2:]
        if os.path.basename(word) == "torchrun" and argv[i - 1] not in ("-m",):
            return argv[:i + 1], argv[i + 1:]
    return argv, None


def is_launcher(target: str, module: bool) -> bool:
    return target in LAUNCHERS if module else os.path.basename(target) == "torchrun"


def worker_flags(args: argparse.Namespace) -> list[str]:
    """`dynstep run` flags that are no superstep option, for each worker's own `dynstep run`
    (--record PATH: each rank records into PATH/rank<N>)."""
    flags = ["--record", os.path.abspath(args.record)] if getattr(args, "record", None) else []
    return flags + (["--explain"] if getattr(args, "explain", False) else [])


def launch(target: str, script_args: Sequence[str], overrides: Mapping[str, Any],
           dap: Mapping[str, Any] | None = None, flags: Sequence[str] = ()) -> int:
    """Run torchrun here, its workers through `dynstep run`, the options in their environment
    (with --dap PORT each worker serves the Debug Adapter Protocol on PORT + its local rank)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    from ..core.errors import OptionsError
    from ..core.options import parse_ranks

    try:
        parse_ranks(overrides.get("ranks"))
    except OptionsError as exc:
        print(f"dynstep run: {exc}", file=sys.stderr)
        return 2
    args = parse_args(list(script_args))
    problem = _check_world(overrides.get("ranks"), args)
    if problem:
        print(f"dynstep run: {problem}", file=sys.stderr)
        return 2
    if args.no_python:
        print("dynstep run: torchrun --no-python runs no Python script; dynstep cannot reach its workers",
              file=sys.stderr)
        return 2
    worker = ["-m", args.training_script] if args.module else [args.training_script]
    args.module, args.training_script = True, "dynstep"
    args.training_script_args = ["run", *flags, *worker, *args.training_script_args]
    os.environ.update(environment(overrides, os.environ))
    if dap is not None:
        os.environ["DYNSTEP_DAP"] = str(dap["address"])
        os.environ["DYNSTEP_DAP_WAIT"] = "1" if dap.get("wait") else "0"
        if dap.get("token"):
            os.environ["DYNSTEP_DAP_TOKEN"] = str(dap["token"])
    try:
        run(args)
    except ChildFailedError as exc:
        codes = sorted({f.exitcode for f in exc.failures.values()})
        return 3 if codes == [3] else 1
    return 0


def _check_world(ranks: Any, args: argparse.Namespace) -> str:
    """--ranks against a world size torchrun fixes on its command line (--nnodes N --nproc-per-node M)."""
    from ..core.errors import OptionsError
    from ..core.options import parse_ranks
    from ..dist.ranks import chosen

    low, _, high = str(args.nnodes).partition(":")
    nodes, procs = (low if high in ("", low) else "elastic"), str(args.nproc_per_node)
    if not (nodes.isdigit() and procs.isdigit()):
        return ""   # elastic or per-device: the workers check it when they know
    try:
        chosen(parse_ranks(ranks), int(nodes) * int(procs))
    except OptionsError as exc:
        return f"--ranks: {exc}"
    return ""


def environment(overrides: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """The DYNSTEP_* variables that carry `dynstep run`'s options to the workers."""
    out: dict[str, str] = {}
    for name in _LISTS:
        if overrides.get(name):
            given = [p for p in env.get(f"DYNSTEP_{name.upper()}", "").split(",") if p.strip()]
            out[f"DYNSTEP_{name.upper()}"] = ",".join([*given, *overrides[name]])
    for name in _VALUES:
        if overrides.get(name) is not None:
            out[f"DYNSTEP_{name.upper()}"] = str(overrides[name])
    for flag in ("step", "grads"):
        if overrides.get(flag):
            out[f"DYNSTEP_{flag.upper()}"] = "1"
    if overrides.get("ranks") is not None:
        out["DYNSTEP_RANKS"] = str(overrides["ranks"])
    return out
