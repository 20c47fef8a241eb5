"""The terminal view of mixed-mode debugging's events (`native`, `native break`), in rich.

    native code of node h · torch.nn.functional.gelu · blocks.0.mlp · model.py:44 (inductor)
      1 kernel  cpp_fused_gelu_mul_3  in …/xy/cxy….main.so (generated source: …/cxy….main.cpp:3)
                kernel @ 0x7f12…  launched at the wrapper's line 874; fuses h, mul
      2 aten    at::native::structured_addmm_out_cpu::impl (libtorch_cpu.so) via extern_kernels.addmm
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.text import Text

from ..mixed.events import NativeShown, NativeTrapped
from ..mixed.findings import ATEN, CPP, EXTERN, FALLBACK, TRITON, NativeKernel, NativeReport, TrapOutcome

LABEL = {CPP: "kernel", TRITON: "triton", EXTERN: "aten", FALLBACK: "aten", ATEN: "aten"}


def render(event: object, c: Console) -> bool:
    """Show one mixed-mode event; False when the event is not one of them."""
    if isinstance(event, NativeShown):
        _report(c, event.report)
        return True
    if isinstance(event, NativeTrapped):
        _trapped(c, event.report, event.outcome)
        return True
    return False


def short(path: str) -> str:
    """…/xy/cxy….main.so: the last folder and the file."""
    head, tail = os.path.split(path)
    return f"…/{os.path.basename(head)}/{tail}" if head else tail


def _report(c: Console, r: NativeReport) -> None:
    where = " · ".join(p for p in (r.target, r.module, r.source) if p)
    c.print(Text(f"native code of node {r.node} · {where}" + (f" ({r.compiler})" if r.compiler else ""),
                 style="bold"))
    if r.views:
        chain = " → ".join((r.node,) + r.views)
        c.print(Text(f"   node {r.node} is a view ({chain}): it aliases the buffer of {r.views[-1]}, which "
                     "the kernel below wrote", style="dim"))
    for i, k in enumerate(r.kernels, 1):
        _kernel(c, i, k)
    if r.other_variant:
        names = ", ".join(dict.fromkeys(k.name for k in r.other_variant))
        c.print(Text(f"   the graph's variant without stop points runs it as {names} (`native break` arms both)",
                     style="dim"))
    for problem in r.problems:
        c.print(Text(f"   {problem}", style="yellow"))
    if r.kernels:
        c.print(Text("   `native break` puts a gdb breakpoint there and runs on: this call already ran it, so gdb "
                     "stops when it runs next", style="dim"))


def _kernel(c: Console, i: int, k: NativeKernel) -> None:
    label = f"   {i} {LABEL.get(k.kind, k.kind):<7} "
    if k.kind == CPP:
        head = f"{k.name}  in {short(k.library)}" + (f" (generated source: {short(k.source)})" if k.source else "")
        more = f"kernel @ {k.address:#x}" if k.address else ""
    elif k.kind == TRITON:
        head = f"{k.name}  (Triton; cuda-gdb breaks on it)" + (f" source {short(k.source)}" if k.source else "")
        more = ""
    elif k.aten is not None:
        impl = k.aten.impl[0].split("(")[0] if k.aten.impl else k.aten.wrapper
        via = f" via {k.name}" if k.kind in (EXTERN, FALLBACK) else ""
        head = f"{impl} ({os.path.basename(k.library)}) for {k.aten.op}{via}"
        more = f"dispatcher kernel {k.aten.wrapper} @ {k.address:#x}, registered at {k.aten.registered_at}"
    else:
        head, more = k.name, ""
    c.print(Text(label, style="bold cyan") + Text(head))
    pad = " " * len(label)
    launched = f"launched at line {k.launch_line} of {short(k.graph)}" if k.launch_line else ""
    fused = f"computes {', '.join(k.nodes)}" if len(k.nodes) > 1 else ""
    details = "; ".join(p for p in (more, launched, fused) if p)
    if details:
        c.print(Text(pad + details, style="dim"))
    if k.problem:
        c.print(Text(pad + k.problem, style="yellow"))


def _trapped(c: Console, r: NativeReport, o: TrapOutcome) -> None:
    if o.trapped and o.handoff:
        names = ", ".join(dict.fromkeys(k.name for k in r.kernels))
        c.print(Text(f"{o.tracer} (pid {o.tracer_pid}) holds {len(o.commands)} breakpoint(s) on {names} for node "
                     f"{r.node}; running on: gdb stops when it runs next", style="bold green"))
        return
    if o.trapped:
        c.print(Text(f"trapped into {o.tracer} (pid {o.tracer_pid}), which has no dynstep commands loaded; the "
                     "breakpoints to type there: " + " ; ".join(o.commands), style="yellow"))
        return
    c.print(Text(f"native break: no trap ({o.reason}): a SIGTRAP would end the program; still stopped here",
                 style="yellow"))
    if o.commands:
        from .gdb_launch import attach_command

        c.print(Text("   start the script under gdb:  dynstep gdb [--pause SEL ...] SCRIPT [ARGS]\n"
                     f"   or attach now:  {attach_command(os.getpid())}\n"
                     "   and type `native break` again (in a gdb without dynstep's commands: "
                     + " ; ".join(o.commands) + ")", style="dim"))
