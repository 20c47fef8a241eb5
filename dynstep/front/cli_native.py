"""`dynstep gdb` and `dynstep vscode`: the verbs of mixed-mode debugging (docs/mixed-mode.md)."""

from __future__ import annotations

import argparse
from typing import Any

from .cli_options import Result, add_run_options, check_overrides, overrides_of, run_argv


def cmd_gdb(args: argparse.Namespace) -> Result:
    """Run a script under gdb (cuda-gdb with --cuda): stop at a node, then `native break` into its kernel."""
    from .gdb_launch import launch

    if not (args.module or args.script):
        return False, "dynstep gdb: give a script (dynstep gdb --pause SEL train.py) or a module (-m pkg.train)", 2
    problem = check_overrides(overrides_of(args))
    if problem:
        return False, f"dynstep gdb: {problem}", 2
    if args.hits < 1:
        return False, f"dynstep gdb: --hits must be 1 or more, got {args.hits}", 2
    ok, message, code = launch(run_argv(args), cuda=args.cuda, debug_kernels=args.debug_kernels, batch=args.batch,
                               hits=args.hits, gdb=args.gdb, dry_run=args.dry_run)
    if args.dry_run and ok:
        print(message)
        return True, "", 0
    return ok, message, code


def cmd_vscode(args: argparse.Namespace) -> Result:
    """Write .vscode/launch.json configurations (Python through dynstep; with --cpp a gdb attach), merged."""
    from .vscode import write_launch_json

    ok, message = write_launch_json(args.dir, cpp=args.cpp, script=args.script, pauses=tuple(args.pause), dap=True)
    if ok:
        print(message)
        return True, ""
    return False, message, 2


def add_gdb(sub: Any) -> None:
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
    add_run_options(gdb)


def add_vscode(sub: Any) -> None:
    vscode = sub.add_parser("vscode", help=cmd_vscode.__doc__)
    vscode.add_argument("--cpp", action="store_true", help="also a C++ (gdb) attach to the same process")
    vscode.add_argument("--dir", default=".", help="the workspace folder (default: .); writes DIR/.vscode/launch.json")
    vscode.add_argument("--script", default="${file}", help="the script the configurations run (default: ${file})")
    vscode.add_argument("--pause", action="append", default=[], help="pause selector for the configurations")
