"""`dynstep compare A B`: two recorded runs aligned node by node; the first node that differs.

    dynstep compare torch213.dynstep torch214.dynstep              # exit 0: no node differs, 1: one does
    dynstep compare a.dynstep b.dynstep --rtol 1e-3 --atol 1e-5 --json
    dynstep compare run.dynstep run.dynstep --steps 10:11          # one run's step 10 against its step 11
    dynstep compare a.dynstep b.dynstep --html compare.html        # with per-module curves of both runs

Bad input (a path that is not a recording, a malformed --steps) exits 2 with what was wrong.
`compare(args)` is the verb (`dynstep.front.cli` wires it) and returns (ok, message, exit code).
"""

from __future__ import annotations

import argparse

Result = tuple[bool, str, int]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the first recording (its execution order is the one walked)")
    parser.add_argument("b", metavar="B", help="the second recording (may be the same path, with --steps)")
    parser.add_argument("--rtol", type=float, default=None,
                        help="relative tolerance (default: by dtype, 1e-4 for float32)")
    parser.add_argument("--atol", type=float, default=None,
                        help="absolute tolerance (default: by dtype, 1e-5 for float32)")
    parser.add_argument("--steps", default=None, metavar="K|KA:KB",
                        help="compare only step K of each node, or A's step KA with B's step KB (default: every step)")
    parser.add_argument("--ranks", default=None, metavar="RA,RB",
                        help="which rank of each distributed recording (default: rank 0 of each)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object instead of tables")
    parser.add_argument("--html", metavar="FILE", help="also write a page with per-module curves of both runs")


def parse_steps(text: str | None) -> int | tuple[int, int] | None:
    """"10" -> 10, "10:11" -> (10, 11); ValueError saying what was expected."""
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--steps {text!r}: expected a step number K or KA:KB (e.g. 10 or 10:11), steps count from 0")
    numbers = [int(p) for p in parts]
    return numbers[0] if len(numbers) == 1 else (numbers[0], numbers[1])


def parse_ranks(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--ranks {text!r}: expected two rank numbers RA,RB (e.g. 0,1)")
    return int(parts[0]), int(parts[1])


def compare(args: argparse.Namespace) -> Result:
    from ..core.errors import DynstepError
    from ..crossrun import compare as run_compare

    try:
        steps, ranks = parse_steps(args.steps), parse_ranks(args.ranks)
        result = run_compare(args.a, args.b, rtol=args.rtol, atol=args.atol, steps=steps, ranks=ranks)
    except (ValueError, DynstepError) as exc:   # StorageError (not a recording) is a DynstepError
        return False, f"dynstep compare: {str(exc).removeprefix('dynstep compare: ')}", 2
    if args.json:
        print(result.to_json())
    else:
        result.show()
    if args.html:
        try:
            result.to_html(args.html)
        except OSError as exc:
            return False, f"dynstep compare: cannot write --html {args.html}: {exc.strerror}", 2
    return result.ok, "", 0 if result.ok else 1
