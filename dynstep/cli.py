"""The `dynstep` command line.

    dynstep demo [--inner inductor]      probe every block of a bundled small GPT and show a table
    dynstep doctor                       what is installed, which kernels are registered, and why not

Each verb is a function `cmd_<verb>(args) -> (ok, message)`; only `main()` prints the message
and exits, so the verbs can be tested in-process and through a subprocess alike.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

Result = tuple[bool, str]


def cmd_demo(args: argparse.Namespace) -> Result:
    """Compile a small GPT with superstep, record every block, print what the probes saw."""
    from .console import print_table
    from .demo.run import PROBES, run_demo

    result = run_demo(inner=args.inner, steps=args.steps)
    print(f"dynstep demo: TinyGPT compiled with backend='superstep' (inner={result.inner}), "
          f"{args.steps} training steps, probes: {', '.join(PROBES)}")
    print_table(result.snapshots, title=f"forward values, last step (inner={result.inner})")
    print_table(result.grads, title="gradients flowing into the probed values, last step")
    print(f"loss {result.loss:.4f}   compiled vs eager after training: max |diff| {result.max_abs_vs_eager:.2e}")
    return True, ""


def cmd_doctor(args: argparse.Namespace) -> Result:
    """Report versions, the backend registration, and which dynstep kernels exist for which device."""
    from .doctor import report

    lines, ok = report()
    print("\n".join(lines))
    return ok, "" if ok else "dynstep doctor found problems (see above)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynstep", description="A step debugger for torch.compile.")
    sub = parser.add_subparsers(dest="verb", required=True)
    demo = sub.add_parser("demo", help=cmd_demo.__doc__)
    demo.add_argument("--inner", default="inductor", help="inner compiler (default: inductor)")
    demo.add_argument("--steps", type=int, default=2, help="training steps to run (default: 2)")
    sub.add_parser("doctor", help=cmd_doctor.__doc__)
    return parser


VERBS: dict[str, Callable[[argparse.Namespace], Result]] = {
    "demo": cmd_demo,
    "doctor": cmd_doctor,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ok, message = VERBS[args.verb](args)
    if message:
        print(message, file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
