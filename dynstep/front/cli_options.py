"""The options `dynstep run` and `dynstep gdb` share: their arguments, the superstep overrides they
make and the check of those, and `--dap`. The CLI's verb modules import this; it imports no verb."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

# (ok, message), or (ok, message, exit code) for verbs that pass a program's own exit code on
Result = tuple[bool, str] | tuple[bool, str, int]


def add_run_options(run: argparse.ArgumentParser) -> None:
    """The options `dynstep run` and `dynstep gdb` share, then the script and its arguments."""
    run.add_argument("-m", dest="module", default=None, help="run a module as a script (like python -m)")
    run.add_argument("--probe", action="append", default=[], help="probe selector (repeatable)")
    run.add_argument("--pause", action="append", default=[], help="pause selector (repeatable)")
    run.add_argument("--commands", default=None, help='scripted stepper commands: "p value.mean(); s; c"')
    run.add_argument("--frontend", default=None, choices=["repl", "script", "pdb"], help="who answers a stop")
    run.add_argument("--inner", default=None, help="inner compiler for every graph (default: the script's backend)")
    run.add_argument("--nan", default=None, choices=["raise", "stop", "warn"], help="first NaN/Inf: raise, stop, warn")
    run.add_argument("--grads", action="store_true", help="also probe the gradient flowing into each probed value")
    run.add_argument("--step", action="store_true", help="stop at the first node of the first graph")
    from .jobs_cli import add_arguments

    add_arguments(run)
    run.add_argument("--step-bytecode", action="store_true",
                     help="stop at the first instruction of the first Dynamo-produced code (dynstep.step_bytecode())")
    run.add_argument("script", nargs="?", help="the script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")


def add_run_only_options(run: argparse.ArgumentParser) -> None:
    """What only `dynstep run` takes: the DAP server, kernel provenance, a recording, compile events."""
    run.add_argument("--dap", metavar="[HOST:]PORT", default=None,
                     help="serve the Debug Adapter Protocol (VS Code, dynstep attach); default host 127.0.0.1")
    run.add_argument("--wait", action="store_true", help="with --dap: hold the script until a client attaches")
    run.add_argument("--dap-token", default=None, help="with --dap: the token clients must give (needed off loopback)")
    run.add_argument("--native", action="store_true",
                     help="keep Inductor's node -> kernel provenance for every graph (`native` at a stop; "
                          "graphs with stop points always have it)")
    run.add_argument("--record", metavar="PATH", default=None,
                     help="stream every probe hit and compile event to the recording PATH (then: dynstep report PATH)")
    run.add_argument("--explain", action="store_true",
                     help="print each graph break and recompile as it happens (default: a summary at the end)")
    run.add_argument("--dump", metavar="DIR", default=None,
                     help="write every stage of every compile (Dynamo graph, AOT graphs, post-grad graph, Inductor "
                          "code, Dynamo's bytecode as Python), each line tied to its nodes and your line, into DIR")
    from .flight_cli import add_run_arguments

    add_run_arguments(run)


def overrides_of(args: argparse.Namespace) -> dict[str, object]:
    """The superstep options the command line sets (on top of the script's own and DYNSTEP_*)."""
    overrides: dict[str, object] = {}
    for name in ("probe", "pause"):
        if getattr(args, name):
            overrides[name] = list(getattr(args, name))
    for name in ("commands", "frontend", "inner", "nan"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    for flag in ("step", "grads"):
        if getattr(args, flag):
            overrides[flag] = True
    return overrides


def check_overrides(overrides: dict[str, object]) -> str:
    """'' when the options (with DYNSTEP_* from the environment) are valid, else one line saying why."""
    from ..core.errors import OptionsError, SelectorError
    from ..core.options import Options, check_environment
    from ..graph.selectors import KINDS

    try:
        from dynstep.backends.superstep import checked

        check_environment()
        checked(Options.from_mapping({**overrides, "inner": overrides.get("inner", "eager")}))
    except SelectorError as exc:
        return (f"{str(exc).splitlines()[0]} (a selector is one of {', '.join(k + ':...' for k in KINDS)} "
                "or *; e.g. module:blocks.0.attn)")
    except OptionsError as exc:
        return str(exc)
    return ""


def dap_options(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str]:
    """--dap/--wait/--dap-token (DYNSTEP_DAP, DYNSTEP_DAP_WAIT, DYNSTEP_DAP_TOKEN): (options or None, problem)."""
    import secrets

    from ..core.errors import OptionsError
    from ..core.options import env_value
    from ..dap.api import parse_address
    from ..dap.session import is_loopback

    address = args.dap or os.environ.get("DYNSTEP_DAP", "").strip() or None
    if address is None:
        return None, "--wait and --dap-token go with --dap PORT" if args.wait or args.dap_token else ""
    try:
        host, _ = parse_address(address)
    except OptionsError as exc:
        return None, f"--dap: {exc}"
    token = args.dap_token or os.environ.get("DYNSTEP_DAP_TOKEN") or None
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(16)
        print(f"dynstep: the debug adapter listens on {host}, beyond this machine: clients must attach with "
              f"token {token} (the \"token\" of the attach configuration, or dynstep attach --token)", file=sys.stderr)
    wait = args.wait or bool(env_value("DYNSTEP_DAP_WAIT"))
    return {"address": address, "token": token, "wait": wait}, ""


def run_argv(args: argparse.Namespace) -> list[str]:
    """The `dynstep run` arguments that reproduce the parsed run options (what gdb's program runs)."""
    argv: list[str] = []
    for name in ("probe", "pause"):
        for value in getattr(args, name):
            argv += [f"--{name}", value]
    for name in ("commands", "frontend", "inner", "nan"):
        if getattr(args, name) is not None:
            argv += [f"--{name}", getattr(args, name)]
    for flag in ("grads", "step", "step_bytecode"):
        argv += [f"--{flag.replace('_', '-')}"] * bool(getattr(args, flag))
    if args.module:
        argv += ["-m", args.module]
    return argv + [a for a in (args.script, *args.args) if a is not None]
