"""What mixed-mode debugging answers, as frozen dataclasses: the native code behind an FX node and
where a debugger breakpoint for it goes. Front ends (the REPL, a DAP server) render these.

    report = lookup.native_report(stop.site)
    report.kernels[0].name, report.kernels[0].library, report.kernels[0].source
    [t.address for t in report.targets()]
"""

from __future__ import annotations

import dataclasses

# kernel kinds
CPP = "cpp"              # an Inductor-generated C++ kernel (`kernel` in its own .so)
TRITON = "triton"        # an Inductor-generated Triton kernel (CUDA; cuda-gdb breaks on its name)
EXTERN = "extern"        # Inductor calls a library kernel (extern_kernels.addmm: aten::addmm.out)
FALLBACK = "fallback"    # Inductor falls back to the aten op itself (torch.ops.aten.topk.default)
ATEN = "aten"            # eager / aot_eager: the op runs through the dispatcher


@dataclasses.dataclass(frozen=True)
class BreakTarget:
    """One debugger breakpoint: an address (gdb `break *ADDR`) or a CUDA kernel name (cuda-gdb).

    `sites`: Python (file, line) frames of which one must be on the stack for the stop to count.
    An aten CPU kernel serves every call of its op, so a stop there is for this node only when the
    FX or wrapper line that launches the node's op is on the Python stack; () stops always.
    """

    address: int = 0
    size: int = 0
    library: str = ""
    symbol: str = ""
    sites: tuple[tuple[str, int], ...] = ()
    cuda_kernel: str = ""

    @property
    def gdb_command(self) -> str:
        """What to type in a gdb that has no dynstep commands loaded."""
        return f"break {self.cuda_kernel}" if self.cuda_kernel else f"break *{self.address:#x}"


@dataclasses.dataclass(frozen=True)
class AtenKernel:
    """The CPU kernel the dispatcher runs for an aten op, named from libtorch's symbol table."""

    op: str                        # aten::addmm.out
    key: str                       # dispatch key asked for (CPU)
    registered_at: str             # RegisterCPU_2.cpp:5051
    wrapper: str                   # at::(anonymous namespace)::wrapper_CPU_addmm_out_out
    library: str                   # .../libtorch_cpu.so
    entries: tuple[tuple[str, int, int], ...]   # (kind: unboxed|symint|boxed, address, size)
    impl: tuple[str, ...] = ()     # at::native::structured_addmm_out_cpu::impl(...)
    entry_point: str = ""          # at::_ops::addmm_out::call(...): `break` by name works too


@dataclasses.dataclass(frozen=True)
class NativeKernel:
    """A piece of native code that computes (part of) an FX node."""

    kind: str                      # CPP, TRITON, EXTERN, FALLBACK or ATEN
    name: str                      # cpp_fused_gelu_mul_3 / extern_kernels.addmm / aten::addmm
    nodes: tuple[str, ...]         # the Dynamo FX nodes it computes (more than one: fused)
    launch: int = 0                # Inductor's launch number in the wrapper (provenance handle)
    graph: str = ""                # the wrapper module (Inductor) or the FX graph's code name
    launch_line: int = 0           # the line of graph that launches it (what py-bt shows)
    library: str = ""              # the loaded .so
    symbol: str = ""               # "kernel" / the dispatcher kernel's demangled name
    address: int = 0
    source: str = ""               # generated source "file:line" (Inductor C++), or ""
    aten: AtenKernel | None = None
    targets: tuple[BreakTarget, ...] = ()
    problem: str = ""              # why no breakpoint can go there ("" when one can)


@dataclasses.dataclass(frozen=True)
class NativeReport:
    """The answer to `native` at a stop: which native code computes the node, and what is missing."""

    node: str
    target: str
    module: str
    source: str                    # the user's "file:line"
    source_text: str
    graph: str                     # forward[0/0]
    compiler: str                  # inductor, aot_eager, eager, or "" when not found
    kernels: tuple[NativeKernel, ...] = ()
    other_variant: tuple[NativeKernel, ...] = ()   # the same node in the graph's variant without stop points
    problems: tuple[str, ...] = ()
    views: tuple[str, ...] = ()    # a view node: the nodes whose buffer it aliases, up to the one a kernel wrote

    def targets(self) -> tuple[BreakTarget, ...]:
        """Every breakpoint `native break` arms, in both variants of the graph."""
        return merged_targets(self.kernels + self.other_variant)


def merged_targets(kernels: tuple[NativeKernel, ...]) -> tuple[BreakTarget, ...]:
    """The kernels' breakpoints, one per address: an aten kernel launched from two wrappers (the two
    variants of a graph) stops for either launch line."""
    out: dict[tuple[int, str], BreakTarget] = {}
    for kernel in kernels:
        for t in kernel.targets:
            key = (t.address, t.cuda_kernel)
            seen = out.get(key)
            if seen is None:
                out[key] = t
            elif seen.sites and t.sites:
                out[key] = dataclasses.replace(seen, sites=tuple(dict.fromkeys(seen.sites + t.sites)))
            else:   # one of them stops always
                out[key] = dataclasses.replace(seen, sites=())
    return tuple(out.values())


@dataclasses.dataclass(frozen=True)
class TrapOutcome:
    """What `native break` did: trapped into the attached debugger, or why not."""

    trapped: bool
    tracer_pid: int
    tracer: str                    # the tracer's command name (gdb, cuda-gdb), "" when none
    reason: str                    # why not ("" when trapped)
    commands: tuple[str, ...]      # the gdb commands that arm the same breakpoints by hand
    handoff: str = ""              # the JSON file the gdb-side commands read
