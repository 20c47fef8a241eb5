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
    flags += ["--dump", os.path.abspath(args.dump)] if getattr(args, "dump", None) else []   # each rank: DIR/rank<N>
    return flags + (["--explain"] if getattr(args, "explain", False) else [])


def launch(target: str, script_args: Sequence[str], overrides: Mapping[str, Any],
           dap: Mapping[str, Any] | None = None, flags: Sequence[str] = ()) -> int:
    """Run torchrun here, its workers through `dynstep run`, the options in their environment
    (with --dap PORT the job's debug adapter listens on PORT, one thread per rank: dap/job.py)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(list(script_args))
    problem = _check_world(overrides.get("ranks"), args)
    if problem:
        print(f"dynstep run: {problem}", file=sys.stderr)
        return 2
    worker = ["-m", args.training_script] if args.module else [args.training_script]
    args.module, args.training_script = True, "dynstep"
    args.training_script_args = ["run", *flags, *worker, *args.training_script_args]
    os.environ.update(environment(overrides, os.environ))
    adapter = None
    if dap is not None:
        adapter, problem = _serve_job(dap, args.nproc_per_node)
        if adapter is None:
            print(f"dynstep run --dap {dap['address']}: {problem}", file=sys.stderr)
            return 2
    code = 1          # what the job's debug client hears if torchrun ends some other way (Ctrl-C, an error)
    try:
        run(args)
        code = 0
    except ChildFailedError as exc:
        codes = sorted({f.exitcode for f in exc.failures.values()})
        code = 3 if codes == [3] else 1
    finally:
        if adapter is not None:
            adapter.job_ended(code)
    return code


def _serve_job(dap: Mapping[str, Any], nproc_per_node: str) -> tuple[Any, str]:
    """The job's debug adapter on PORT (one thread per rank, dap/job.py); the worker with local rank i
    serves its own on 127.0.0.1:PORT+1+i (DYNSTEP_DAP in its environment)."""
    from torch.distributed.run import determine_local_world_size

    from ..core.errors import OptionsError
    from ..dap.api import parse_address
    from ..dap.job import JobAdapter

    try:
        host, port = parse_address(dap["address"])
        local = determine_local_world_size(str(nproc_per_node))
    except (OptionsError, ValueError) as exc:
        return None, str(exc)
    if not 0 < port <= 65535 - local - 1:
        return None, f"a torchrun job needs a fixed port with {local + 1} free above it (the job's adapter, then " \
                     f"one per local rank), got {port}"
    try:
        adapter = JobAdapter(host, port, [("127.0.0.1", port + 1 + i) for i in range(local)],
                             token=dap.get("token"))
    except (OSError, ValueError) as exc:
        return None, f"cannot serve the debug adapter protocol: {exc}"
    os.environ["DYNSTEP_DAP"] = f"127.0.0.1:{port + 1}"
    os.environ["DYNSTEP_DAP_JOB"] = f"{'127.0.0.1' if host in ('', '0.0.0.0', '::') else host}:{adapter.port}"
    os.environ["DYNSTEP_DAP_WAIT"] = "1" if dap.get("wait") else "0"
    if dap.get("token"):
        os.environ["DYNSTEP_DAP_TOKEN"] = str(dap["token"])
    print(f"dynstep: the job's debug adapter listens on {host}:{adapter.port}: one thread per rank "
          f"(each rank also serves on 127.0.0.1:{port + 1}..{port + local})", file=sys.stderr)
    return adapter, ""


def _check_world(ranks: Any, args: argparse.Namespace) -> str:
    """--ranks (and against a world size torchrun fixes on its command line: --nnodes N --nproc-per-node M),
    and a launcher dynstep can reach the workers of: the problem, or ""."""
    from ..core.errors import OptionsError
    from ..core.options import parse_ranks
    from ..jobs.ranks import chosen

    try:
        parse_ranks(ranks)
    except OptionsError as exc:
        return str(exc)
    if args.no_python:
        return "torchrun --no-python runs no Python script; dynstep cannot reach its workers"
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
    if overrides.get("flight"):   # --flight DIR: every rank's recorder, dumps named by rank in DIR
        from .flight_cli import flight_environment

        out.update(flight_environment(overrides["flight"]))
    return out
