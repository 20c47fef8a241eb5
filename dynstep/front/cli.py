"""The `dynstep` command line.

    dynstep demo [--inner inductor]      probe every block of a bundled small GPT and show a table
    dynstep doctor [--fusion]            what is installed, which kernels are registered, and why not
    dynstep run SCRIPT [ARGS]            run a script, every torch.compile through superstep; prints the
                                         graph breaks and recompiles at the end (--explain: as they happen)
    dynstep run -m MODULE [ARGS]         ... --pause SEL --probe SEL --commands "p value; c" --frontend pdb
    dynstep run --probe SEL --record R SCRIPT   ... and keep what the probes saw in the recording R
    dynstep run --step-bytecode SCRIPT   step through the bytecode Dynamo wrote, and into its graphs
    dynstep run --dump DIR SCRIPT        every stage of every compile as files (docs/stages.md)
    dynstep run --ranks 1 -m torch.distributed.run --nproc-per-node 2 train.py   (docs/distributed.md)
    dynstep run --dap 5679 [--wait] SCRIPT   serve the Debug Adapter Protocol (VS Code attaches; docs/vscode.md);
                                         --dap HOST:PORT off loopback needs --dap-token (or prints one)
    dynstep attach HOST:PORT             the terminal REPL driving a process served with --dap
    dynstep diff SCRIPT [--backend B]    diff every compiled graph in SCRIPT against eager and float64
    dynstep compare A B [--json]         two recorded runs aligned node by node: the first node that differs
    dynstep gdb --pause SEL SCRIPT       SCRIPT under gdb: at a stop, `native` names the node's kernel and
                                         `native break` puts gdb there (--cuda: cuda-gdb; --batch for CI)
    dynstep vscode [--cpp]               .vscode/launch.json: Python through dynstep, a gdb attach for C++
    dynstep report RECORDING [-o HTML]   a page with plots, the first NaN, graphs, graph breaks, all hits;
                                         --json FILE, --tensorboard DIR, --tlparse TRACE_DIR, --select SEL
    dynstep run --flight [DIR] SCRIPT    the flight recorder: the last steps' statistics dumped under DIR on
                                         a NaN/Inf, a spike, an exception, SIGTERM (docs/flight.md)
    dynstep flight replay DUMP           re-run a dump's graph call: every node probed, eager vs compiled

Each verb is a function `cmd_<verb>(args) -> (ok, message)`; only `main()` prints the message
and exits, so the verbs can be tested in-process and through a subprocess alike.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .cli_native import add_gdb, add_vscode, cmd_gdb, cmd_vscode
from .cli_options import Result, add_run_options, add_run_only_options, check_overrides, dap_options, overrides_of

__all__ = ["Result", "VERBS", "build_parser", "main"]


def cmd_demo(args: argparse.Namespace) -> Result:
    """Compile a small GPT with superstep, record every block, print what the probes saw."""
    from .console import phases, print_table
    from .demo.run import NEXT, PROBES, run_demo

    with phases("dynstep demo") as on_phase:
        result = run_demo(inner=args.inner, steps=args.steps, on_phase=on_phase)
    print(f"dynstep demo: TinyGPT compiled with backend='superstep' (inner={result.inner}), "
          f"{args.steps} training steps, probes: {', '.join(PROBES)}")
    print_table(result.snapshots, title=f"forward values, last step (inner={result.inner})")
    print_table(result.grads, title="gradients flowing into the probed values, last step")
    print(f"loss {result.loss:.4f}   compiled vs eager after training: max |diff| {result.max_abs_vs_eager:.2e}")
    print("\nTry next, on your own script:\n" + "\n".join(f"  {cmd:<64} # {what}" for cmd, what in NEXT))
    return True, ""


def cmd_doctor(args: argparse.Namespace) -> Result:
    """Report versions, the backend registration, and which dynstep kernels exist for which device."""
    from .doctor import report

    lines, ok = report()
    if getattr(args, "fusion", False):
        from .doctor_fusion import fusion_report

        more, fusion_ok = fusion_report()
        lines, ok = lines + more, ok and fusion_ok
    print("\n".join(lines))
    return ok, "" if ok else "dynstep doctor found problems (see above)"


def cmd_run(args: argparse.Namespace) -> Result:
    """Run a script or module with every torch.compile routed through superstep (pause, step, probe)."""
    from .flight_cli import flight_overrides
    from .runner import run

    target = args.module or args.script
    if not target:
        return False, "dynstep run: give a script (dynstep run train.py) or a module (dynstep run -m pkg.train)", 2
    script_args = list(args.args) if args.module is None else [a for a in (args.script, *args.args) if a]
    try:
        overrides = {**overrides_of(args), **flight_overrides(args)}
    except ValueError as exc:
        return False, f"dynstep run: {exc}", 2
    problem = check_overrides(overrides)
    if problem:
        return False, f"dynstep run: {problem}", 2
    dap, problem = dap_options(args)
    if problem:
        return False, f"dynstep run: {problem}", 2
    from . import jobs_cli

    overrides = jobs_cli.overrides_with_ranks(args, overrides)
    if jobs_cli.is_launcher(target, args.module is not None):   # torchrun: its workers run through dynstep
        code = jobs_cli.launch(target, script_args, overrides, dap, jobs_cli.worker_flags(args))
        return code == 0, "", code
    code = run(target, script_args, overrides, module=args.module is not None, step_bytecode=args.step_bytecode,
               native=args.native, dap=dap, explain=args.explain, record=args.record, dump=args.dump)
    return code == 0, "", code


def cmd_attach(args: argparse.Namespace) -> Result:
    """Drive a process served with `dynstep run --dap` from this terminal (the same REPL, over DAP)."""
    from .attach import attach

    return attach(args.address, token=args.token)


def cmd_diff(args: argparse.Namespace) -> Result:
    """Run SCRIPT with every torch.compile diffed against eager and float64; exit 1 on divergence.

    The script's compiled calls return the compiled values of the backend under test (its own backend,
    mode and options unless --backend/--mode say otherwise), so it behaves as it does without the diff."""
    import os

    script = os.path.abspath(args.script)
    if not os.path.isfile(script):
        return False, f"dynstep diff: no such script {args.script!r}", 2
    try:
        backend = _backend_arg(args.backend)
    except ValueError as exc:
        return False, str(exc), 2
    report, script_exit = _diff_script(args, script, backend)
    report.show()
    if args.json:
        report.to_json(args.json)
    if args.html:
        report.to_html(args.html)
    if not report.graphs:
        return False, "dynstep diff: the script compiled no graph with torch.compile"
    if not report.ok:
        return False, "", 1   # show() printed the summary; exit 1 whatever the script's own exit code
    return script_exit == 0, "", script_exit


def _diff_script(args: argparse.Namespace, script: str, backend: Any):
    """Run the script under the diff; (report, the script's own exit code)."""
    import os
    import runpy

    from ..eagerdiff.api import config, diffing
    from .diff_show import progress_bar

    saved_argv, saved_path = list(sys.argv), list(sys.path)
    sys.argv, sys.path[0:0] = [script, *args.script_args], [os.path.dirname(script)]
    script_exit = 0
    try:
        with progress_bar() as progress:
            cfg = config(backend, mode=args.mode, training=args.training, repro=args.repro,
                         ladder=not args.no_ladder, progress=progress, root_cause=not args.no_root_cause,
                         backend_ref=args.backend if args.backend and ":" in args.backend else None)
            with diffing(cfg, calls=args.calls) as collector:
                try:
                    runpy.run_path(script, run_name="__main__")
                except SystemExit as exc:   # sys.exit(main()): the report still comes, then the verdict
                    script_exit = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return collector.report(), script_exit


def cmd_flight(args: argparse.Namespace) -> Result:
    """The flight recorder's dumps: `dynstep flight replay DUMP` re-runs the graph call a dump kept."""
    from .flight_cli import cmd_flight as run_flight

    return run_flight(args)


def cmd_report(args: argparse.Namespace) -> Result:
    """Write a recording's report: an HTML page with plots, the first NaN, graphs and graph breaks."""
    from .report_cli import report

    return report(args)


def cmd_compare(args: argparse.Namespace) -> Result:
    """Compare two recorded runs node by node (any two processes); exit 1 when a node differs, 2 on bad input."""
    from .compare_cli import compare

    return compare(args)


def _backend_arg(text: str | None):
    """A backend name, or ``module:attribute`` naming a backend callable (None: the script's own)."""
    if text is None or ":" not in text:
        return text
    import importlib

    module, _, attr = text.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"dynstep diff: --backend {text!r}: cannot import {attr!r} from {module!r} ({exc}); "
                         "expected a backend name like 'inductor' or module:attribute") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynstep", description="A step debugger for torch.compile.")
    sub = parser.add_subparsers(dest="verb", required=True)
    demo = sub.add_parser("demo", help=cmd_demo.__doc__)
    demo.add_argument("--inner", default="inductor", help="inner compiler (default: inductor)")
    demo.add_argument("--steps", type=int, default=2, help="training steps to run (default: 2)")
    doctor = sub.add_parser("doctor", help=cmd_doctor.__doc__)
    doctor.add_argument("--fusion", action="store_true",
                        help="also compile a small training step with summary probes on every node, and without, "
                             "and print the kernels per graph (does probing change Inductor's fusion here?)")
    run = sub.add_parser("run", help=cmd_run.__doc__,
                         usage="dynstep run [options] SCRIPT [ARGS...] | dynstep run [options] -m MODULE [ARGS...]")
    add_run_only_options(run)
    add_run_options(run)
    attach = sub.add_parser("attach", help=cmd_attach.__doc__)
    attach.add_argument("address", metavar="HOST:PORT", help="where `dynstep run --dap` listens (e.g. localhost:5679)")
    attach.add_argument("--token", default=os.environ.get("DYNSTEP_DAP_TOKEN"),
                        help="the server's token (needed when it listens beyond loopback; default DYNSTEP_DAP_TOKEN)")
    add_gdb(sub)
    add_vscode(sub)
    _add_diff(sub)
    from .report_cli import add_arguments

    add_arguments(sub.add_parser("report", help=cmd_report.__doc__))
    from . import compare_cli

    compare_cli.add_arguments(sub.add_parser("compare", help=cmd_compare.__doc__))
    from .flight_cli import add_arguments as add_flight

    add_flight(sub.add_parser("flight", help=cmd_flight.__doc__))
    return parser


def _add_diff(sub: Any) -> None:
    diff = sub.add_parser("diff", help=cmd_diff.__doc__)
    diff.add_argument("script", help="the Python script to run")
    diff.add_argument("script_args", nargs="*", help="arguments for the script (after --)")
    diff.add_argument("--backend", default=None,
                      help="backend to diff: a name or module:attribute (default: the one each torch.compile call "
                           "names, with its mode and options; inductor when it names none)")
    diff.add_argument("--mode", default=None, help="torch.compile mode for the backend (default: the script's)")
    diff.add_argument("--training", action="store_true", help="also diff gradients of every graph")
    diff.add_argument("--repro", metavar="DIR", help="write a runnable repro of the first divergence to DIR")
    diff.add_argument("--json", metavar="FILE", help="write the report as JSON")
    diff.add_argument("--html", metavar="FILE", help="write the report as a self-contained HTML page")
    diff.add_argument("--calls", type=int, default=1, help="diff the first N calls of each graph (default: 1)")
    diff.add_argument("--no-ladder", action="store_true", help="skip the backends ladder")
    diff.add_argument("--no-root-cause", action="store_true",
                      help="skip the ablations that name the compiler subsystem behind the first divergence")


VERBS: dict[str, Callable[[argparse.Namespace], Result]] = {
    "demo": cmd_demo,
    "doctor": cmd_doctor,
    "run": cmd_run,
    "attach": cmd_attach,
    "gdb": cmd_gdb,
    "vscode": cmd_vscode,
    "diff": cmd_diff,
    "report": cmd_report,
    "compare": cmd_compare,
    "flight": cmd_flight,
}


def main(argv: Sequence[str] | None = None) -> int:
    from ..core.errors import OptionsError
    from ..core.options import check_environment
    from . import wiring

    try:
        notes = check_environment()   # every DYNSTEP_* variable, before any module reads one
    except OptionsError as exc:
        print(f"dynstep: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"dynstep: {note}", file=sys.stderr)
    wiring.install()
    from .jobs_cli import split_launcher

    from .flight_cli import bare_flight

    argv, launcher_args = split_launcher(bare_flight(list(sys.argv[1:] if argv is None else argv)))
    args = build_parser().parse_args(argv)
    if launcher_args is not None:   # torchrun's own options are not dynstep's
        args.args = launcher_args
    ok, message, *code = VERBS[args.verb](args)
    if message:
        print(message, file=sys.stderr)
    if code:
        return code[0]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
