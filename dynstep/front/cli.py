"""The `dynstep` command line.

    dynstep demo [--inner inductor]      probe every block of a bundled small GPT and show a table
    dynstep doctor                       what is installed, which kernels are registered, and why not
    dynstep run SCRIPT [ARGS]            run a script, every torch.compile through superstep
    dynstep run -m MODULE [ARGS]         ... --pause SEL --probe SEL --commands "p value; c" --frontend pdb
    dynstep run --step-bytecode SCRIPT   step through the bytecode Dynamo wrote, and into its graphs
    dynstep run --ranks 1 -m torch.distributed.run --nproc-per-node 2 train.py   (docs/distributed.md)
    dynstep run --dap 5679 [--wait] SCRIPT   serve the Debug Adapter Protocol (VS Code attaches; docs/vscode.md);
                                         --dap HOST:PORT off loopback needs --dap-token (or prints one)
    dynstep attach HOST:PORT             the terminal REPL driving a process served with --dap
    dynstep diff SCRIPT [--backend B]    diff every compiled graph in SCRIPT against eager and float64
    dynstep gdb --pause SEL SCRIPT       SCRIPT under gdb: at a stop, `native` names the node's kernel and
                                         `native break` puts gdb there (--cuda: cuda-gdb; --batch for CI)
    dynstep vscode [--cpp]               .vscode/launch.json: Python through dynstep, a gdb attach for C++

Each verb is a function `cmd_<verb>(args) -> (ok, message)`; only `main()` prints the message
and exits, so the verbs can be tested in-process and through a subprocess alike.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

# (ok, message), or (ok, message, exit code) for verbs that pass a program's own exit code on
Result = tuple[bool, str] | tuple[bool, str, int]


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


def cmd_run(args: argparse.Namespace) -> Result:
    """Run a script or module with every torch.compile routed through superstep (pause, step, probe)."""
    from .runner import run

    target = args.module or args.script
    if not target:
        return False, "dynstep run: give a script (dynstep run train.py) or a module (dynstep run -m pkg.train)", 2
    script_args = list(args.args) if args.module is None else [a for a in (args.script, *args.args) if a]
    overrides = _overrides(args)
    problem = _check_overrides(overrides)
    if problem:
        return False, f"dynstep run: {problem}", 2
    dap, problem = _dap_options(args)
    if problem:
        return False, f"dynstep run: {problem}", 2
    from . import dist_cli

    overrides = dist_cli.overrides_with_ranks(args, overrides)
    if dist_cli.is_launcher(target, args.module is not None):   # torchrun: its workers run through dynstep
        code = dist_cli.launch(target, script_args, overrides, dap)
        return code == 0, "", code
    code = run(target, script_args, overrides, module=args.module is not None,
               step_bytecode=args.step_bytecode, native=args.native, dap=dap)
    return code == 0, "", code


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    overrides: dict[str, object] = {}
    for name in ("probe", "pause"):
        if getattr(args, name):
            overrides[name] = list(getattr(args, name))
    for name in ("commands", "frontend", "inner", "nan"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.step:
        overrides["step"] = True
    return overrides


def _dap_options(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str]:
    """--dap/--wait/--dap-token (DYNSTEP_DAP, DYNSTEP_DAP_WAIT, DYNSTEP_DAP_TOKEN): (options or None, problem)."""
    import secrets

    from ..core.errors import OptionsError
    from ..remote.api import parse_address
    from ..remote.requests import is_loopback

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
    wait = args.wait or os.environ.get("DYNSTEP_DAP_WAIT", "").strip().lower() in ("1", "true", "yes", "on")
    return {"address": address, "token": token, "wait": wait}, ""


def cmd_attach(args: argparse.Namespace) -> Result:
    """Drive a process served with `dynstep run --dap` from this terminal (the same REPL, over DAP)."""
    from .attach import attach

    return attach(args.address, token=args.token)


def cmd_gdb(args: argparse.Namespace) -> Result:
    """Run a script under gdb (cuda-gdb with --cuda): stop at a node, then `native break` into its kernel."""
    from .gdb_launch import launch

    if not (args.module or args.script):
        return False, "dynstep gdb: give a script (dynstep gdb --pause SEL train.py) or a module (-m pkg.train)", 2
    problem = _check_overrides(_overrides(args))
    if problem:
        return False, f"dynstep gdb: {problem}", 2
    if args.hits < 1:
        return False, f"dynstep gdb: --hits must be 1 or more, got {args.hits}", 2
    ok, message, code = launch(_run_argv(args), cuda=args.cuda, debug_kernels=args.debug_kernels, batch=args.batch,
                               hits=args.hits, gdb=args.gdb, dry_run=args.dry_run)
    if args.dry_run and ok:
        print(message)
        return True, "", 0
    return ok, message, code


def _run_argv(args: argparse.Namespace) -> list[str]:
    """The `dynstep run` arguments that reproduce the parsed run options (what gdb's program runs)."""
    argv: list[str] = []
    for name in ("probe", "pause"):
        for value in getattr(args, name):
            argv += [f"--{name}", value]
    for name in ("commands", "frontend", "inner", "nan"):
        if getattr(args, name) is not None:
            argv += [f"--{name}", getattr(args, name)]
    argv += ["--step"] * bool(args.step) + ["--step-bytecode"] * bool(args.step_bytecode)
    if args.module:
        argv += ["-m", args.module]
    return argv + [a for a in (args.script, *args.args) if a is not None]


def cmd_vscode(args: argparse.Namespace) -> Result:
    """Write .vscode/launch.json configurations (Python through dynstep; with --cpp a gdb attach), merged."""
    from .vscode import write_launch_json

    ok, message = write_launch_json(args.dir, cpp=args.cpp, script=args.script, pauses=tuple(args.pause),
                                    dap=_serves_dap())
    if ok:
        print(message)
        return True, ""
    return False, message, 2


def _serves_dap() -> bool:
    """Whether `dynstep run --dap PORT` exists in this dynstep (the DAP server is its own issue)."""
    known, _ = build_parser().parse_known_args(["run", "--dap", "5678", "script.py"])
    return hasattr(known, "dap")


def _check_overrides(overrides: dict[str, object]) -> str:
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


def cmd_diff(args: argparse.Namespace) -> Result:
    """Run SCRIPT with every torch.compile diffed against eager and float64; exit 1 on divergence."""
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
        return False, report.summary(), 1   # whatever the script's own exit code
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
                         ladder=not args.no_ladder, progress=progress,
                         backend_ref=args.backend if ":" in args.backend else None)
            with diffing(cfg, calls=args.calls) as collector:
                try:
                    runpy.run_path(script, run_name="__main__")
                except SystemExit as exc:   # sys.exit(main()): the report still comes, then the verdict
                    script_exit = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return collector.report(), script_exit


def _backend_arg(text: str):
    """A backend name, or ``module:attribute`` naming a backend callable."""
    if ":" not in text:
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
    sub.add_parser("doctor", help=cmd_doctor.__doc__)
    run = sub.add_parser("run", help=cmd_run.__doc__,
                         usage="dynstep run [options] SCRIPT [ARGS...] | dynstep run [options] -m MODULE [ARGS...]")
    run.add_argument("--dap", metavar="[HOST:]PORT", default=None,
                     help="serve the Debug Adapter Protocol (VS Code, dynstep attach); default host 127.0.0.1")
    run.add_argument("--wait", action="store_true", help="with --dap: hold the script until a client attaches")
    run.add_argument("--dap-token", default=None, help="with --dap: the token clients must give (needed off loopback)")
    run.add_argument("--native", action="store_true",
                     help="keep Inductor's node -> kernel provenance for every graph (`native` at a stop; "
                          "graphs with stop points always have it)")
    _add_run_options(run)
    attach = sub.add_parser("attach", help=cmd_attach.__doc__)
    attach.add_argument("address", metavar="HOST:PORT", help="where `dynstep run --dap` listens (e.g. localhost:5679)")
    attach.add_argument("--token", default=os.environ.get("DYNSTEP_DAP_TOKEN"),
                        help="the server's token (needed when it listens beyond loopback; default DYNSTEP_DAP_TOKEN)")
    _add_gdb(sub)
    _add_vscode(sub)
    _add_diff(sub)
    return parser


def _add_run_options(run: argparse.ArgumentParser) -> None:
    """The options `dynstep run` and `dynstep gdb` share, then the script and its arguments."""
    run.add_argument("-m", dest="module", default=None, help="run a module as a script (like python -m)")
    run.add_argument("--probe", action="append", default=[], help="probe selector (repeatable)")
    run.add_argument("--pause", action="append", default=[], help="pause selector (repeatable)")
    run.add_argument("--commands", default=None, help='scripted stepper commands: "p value.mean(); s; c"')
    run.add_argument("--frontend", default=None, choices=["repl", "script", "pdb"], help="who answers a stop")
    run.add_argument("--inner", default=None, help="inner compiler for every graph (default: the script's backend)")
    run.add_argument("--nan", default=None, choices=["raise", "stop", "warn"], help="first NaN/Inf: raise, stop, warn")
    run.add_argument("--step", action="store_true", help="stop at the first node of the first graph")
    from .dist_cli import add_arguments

    add_arguments(run)
    run.add_argument("--step-bytecode", action="store_true",
                     help="stop at the first instruction of the first Dynamo-produced code (dynstep.step_bytecode())")
    run.add_argument("script", nargs="?", help="the script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")


def _add_gdb(sub: Any) -> None:
    gdb = sub.add_parser("gdb", help=cmd_gdb.__doc__,
                         usage="dynstep gdb [--cuda] [--debug-kernels] [--batch] [run options] "
                               "SCRIPT|-m MODULE [ARGS...]")
    gdb.add_argument("--cuda", action="store_true", help="use cuda-gdb (Triton kernels: break on the kernel's name)")
    gdb.add_argument("--debug-kernels", action="store_true",
                     help="compile Inductor's C++ kernels with -O0 -g (TORCHINDUCTOR_DEBUG_COMPILE=1): "
                          "step them by line")
    gdb.add_argument("--batch", action="store_true",
                     help="no gdb prompt: show dynstep-bt at the first kernel stops, run to the end (CI)")
    gdb.add_argument("--hits", type=int, default=1, help="with --batch: kernel stops to show (default: 1)")
    gdb.add_argument("--gdb", default=None, metavar="PATH", help="the debugger to run (default: gdb, or cuda-gdb)")
    gdb.add_argument("--dry-run", action="store_true", help="print the gdb command file and command line, run nothing")
    _add_run_options(gdb)


def _add_vscode(sub: Any) -> None:
    vscode = sub.add_parser("vscode", help=cmd_vscode.__doc__)
    vscode.add_argument("--cpp", action="store_true", help="also a C++ (gdb) attach to the same process")
    vscode.add_argument("--dir", default=".", help="the workspace folder (default: .); writes DIR/.vscode/launch.json")
    vscode.add_argument("--script", default="${file}", help="the script the configurations run (default: ${file})")
    vscode.add_argument("--pause", action="append", default=[], help="pause selector for the configurations")


def _add_diff(sub: Any) -> None:
    diff = sub.add_parser("diff", help=cmd_diff.__doc__)
    diff.add_argument("script", help="the Python script to run")
    diff.add_argument("script_args", nargs="*", help="arguments for the script (after --)")
    diff.add_argument("--backend", default="inductor",
                      help="backend to diff: a name (default: inductor) or module:attribute")
    diff.add_argument("--mode", default=None, help="torch.compile mode for the backend")
    diff.add_argument("--training", action="store_true", help="also diff gradients of every graph")
    diff.add_argument("--repro", metavar="DIR", help="write a runnable repro of the first divergence to DIR")
    diff.add_argument("--json", metavar="FILE", help="write the report as JSON")
    diff.add_argument("--html", metavar="FILE", help="write the report as a self-contained HTML page")
    diff.add_argument("--calls", type=int, default=1, help="diff the first N calls of each graph (default: 1)")
    diff.add_argument("--no-ladder", action="store_true", help="skip the backends ladder")


VERBS: dict[str, Callable[[argparse.Namespace], Result]] = {
    "demo": cmd_demo,
    "doctor": cmd_doctor,
    "run": cmd_run,
    "attach": cmd_attach,
    "gdb": cmd_gdb,
    "vscode": cmd_vscode,
    "diff": cmd_diff,
}


def main(argv: Sequence[str] | None = None) -> int:
    from ..core.errors import OptionsError
    from ..core.options import check_environment
    from . import wiring

    try:
        check_environment()   # before any module reads a DYNSTEP_* variable
    except OptionsError as exc:
        print(f"dynstep: {exc}", file=sys.stderr)
        return 2
    wiring.install()
    from .dist_cli import split_launcher

    argv, launcher_args = split_launcher(sys.argv[1:] if argv is None else argv)
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
