"""Mixed-mode debugging: from a paused FX node into the native code that computes it.

    provenance   Inductor's node -> kernel mapping, kept for every graph compiled while tracking
    inductor     a kernel launch -> the generated C++ kernel's library, address and source, the Triton
                 kernel's name, or the aten kernel behind an extern / fallback call
    aten         an aten op -> the dispatcher's CPU kernel, named from libtorch's symbol table
    fxgraphs     eager / aot_eager: a node -> its aten ops and the FX line that launches each
    elf          ELF symbol tables, C++ demangling, dladdr (release builds: names, no DWARF)
    findings     what it answers, typed: NativeReport, NativeKernel, AtenKernel, BreakTarget, TrapOutcome
    lookup       the engine API: native_report(site) -> NativeReport (typed, for any front end)
    trap         hand breakpoints to an attached debugger (TracerPid check, JSON hand-off, SIGTRAP)
    commands     the stepper's `native` / `native break`
    gdb_commands the gdb side (loaded into gdb with -x; stdlib only, never imported by dynstep)

`dynstep gdb` (dynstep/front/gdb_launch.py) starts a script under gdb with all of it switched on.
"""
