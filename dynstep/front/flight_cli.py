"""The flight recorder on the command line: `dynstep run --flight [DIR]` and `dynstep flight replay DUMP`.

    dynstep run --flight train.py                       # dumps under ./dynstep-flight/
    dynstep run --flight dumps/ --flight-steps 16 --flight-on nonfinite,spike:loss train.py
    dynstep flight replay dumps/20261125-101500-rank0-nonfinite [-o OUT] [--json F] [--html F]

`cmd_flight(args)` returns (ok, message, exit code) and leaves printing the message to `main()`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..core.flight_options import DEFAULT_PATH

Result = tuple[bool, str, int]


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--flight", metavar="DIR", nargs="?", const=DEFAULT_PATH, default=None,
                     help=f"the flight recorder: per-node statistics of the last steps, dumped under DIR (default "
                          f"{DEFAULT_PATH}/) when a NaN/Inf, a spike, an exception or SIGTERM/SIGINT comes")
    run.add_argument("--flight-steps", type=int, default=None, metavar="K", help="steps kept before a trigger (64)")
    run.add_argument("--flight-on", default=None, metavar="RULES",
                     help="trigger rules, comma-separated: nonfinite, nonfinite:value, spike:NAME[:FACTOR], "
                          "exception, signal (default nonfinite,exception,signal)")
    run.add_argument("--flight-select", action="append", default=[], metavar="SEL",
                     help="values the flight recorder probes (repeatable; default every node)")


def bare_flight(argv: list[str]) -> list[str]:
    """`dynstep run --flight train.py ...`: a script right after a bare --flight is the script, not the
    folder (argparse would take it as the folder); the default folder is put in between."""
    if not argv or argv[0] != "run" or "--flight" not in argv:
        return argv
    at = argv.index("--flight") + 1
    if at < len(argv) and argv[at].endswith(".py") and os.path.isfile(argv[at]):
        return argv[:at] + [DEFAULT_PATH] + argv[at:]
    return argv


def flight_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """{"flight": {...}} for superstep when --flight was given ({} otherwise)."""
    flight = getattr(args, "flight", None)
    if flight is None:
        if any(getattr(args, name, None) for name in ("flight_steps", "flight_on", "flight_select")):
            raise ValueError("--flight-steps, --flight-on and --flight-select go with --flight [DIR]")
        return {}
    spec: dict[str, Any] = {"path": flight}
    if args.flight_steps is not None:
        spec["steps"] = args.flight_steps
    if args.flight_on:
        spec["on"] = [r.strip() for r in args.flight_on.split(",") if r.strip()]
    if args.flight_select:
        spec["select"] = list(args.flight_select)
    return {"flight": spec}


def flight_environment(spec: dict[str, Any]) -> dict[str, str]:
    """The DYNSTEP_FLIGHT* variables that carry --flight's options to a torchrun job's workers."""
    out = {"DYNSTEP_FLIGHT": os.path.abspath(spec["path"])}
    if "steps" in spec:
        out["DYNSTEP_FLIGHT_STEPS"] = str(spec["steps"])
    for key, name in (("on", "DYNSTEP_FLIGHT_ON"), ("select", "DYNSTEP_FLIGHT_SELECT")):
        if key in spec:
            out[name] = ",".join(spec[key])
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="flight_verb", required=True)
    replay = sub.add_parser("replay", help="re-run a dump's graph call: every node probed, eager vs compiled")
    replay.add_argument("dump", help="a flight recorder's dump (a folder under the flight path)")
    replay.add_argument("-o", "--output", metavar="DIR", default=None,
                        help="the probed replay's recording (default: DUMP.replay beside the dump)")
    replay.add_argument("--json", metavar="FILE", help="also write the diff as JSON")
    replay.add_argument("--html", metavar="FILE", help="also write the diff as a self-contained page")


def cmd_flight(args: argparse.Namespace) -> Result:
    """The flight recorder's dumps: `dynstep flight replay DUMP`."""
    from ..core.errors import StorageError
    from ..flight import replay

    if not os.path.isdir(args.dump):
        return False, f"dynstep flight replay: no dump at {args.dump} (expected a folder the flight recorder wrote)", 2
    try:
        result = replay(args.dump, out=args.output)
    except StorageError as exc:
        return False, f"dynstep flight replay: {exc}", 2
    _show(result)
    if args.json:
        result.diff.to_json(args.json)
    if args.html:
        result.diff.to_html(args.html)
    return True, "", 0


def _show(result: Any) -> None:
    from rich.console import Console
    from rich.markup import escape

    out = Console(highlight=False, soft_wrap=True)
    t = result.trigger
    out.print(f"[bold]dynstep flight replay[/bold] {escape(result.dump)}")
    out.print(escape(f"trigger: {t.kind} at step {t.step}" + (f", {t.where}" if t.where else "")
                     + (f": {t.reason}" if t.reason else "")))
    out.print(escape(f"replayed: {result.graph}, the call of step {result.step}; every node probed -> "
                     f"{result.recording}"))
    if result.node:
        for label, stats in (("dumped", result.dumped), ("replayed (compiled)", result.compiled),
                             ("eager", result.eager)):
            out.print(escape(f"  {result.node} {label:>20}: {_stats(stats)}"))
        out.print(f"reproduced: {'yes' if result.reproduced else 'no' if result.reproduced is False else '-'}")
    for note in result.notes:
        out.print(f"[yellow]note:[/yellow] {escape(note)}")
    out.print(f"[bold]verdict:[/bold] {escape(result.verdict)}")
    result.diff.show()


def _stats(stats: Any) -> str:
    if stats is None:
        return "-"
    return (f"absmax {stats.absmax:.6g}  mean {stats.mean:.6g}  std {stats.std:.6g}  "
            f"nan {stats.nan}  inf {stats.inf}")
