"""Every front end: what the user types and sees. The only part of dynstep that prints or imports
rich; the engine reaches it only through `dynstep.core.wiring` (filled by `wiring.install`, the
composition root) and typed events.

    cli           the `dynstep` command (demo, doctor, run, diff)
    runner        `dynstep run`: a script with every torch.compile routed through superstep
    doctor, demo  `dynstep doctor`, `dynstep demo` (and the demo's TinyGPT)
    console       probe prints, warnings, snapshot tables
    repl          the terminal REPL of the stepper and the rendering of stepper events
    bytecode_repl the rendering of the bytecode stepper's events
    frontends     scripted commands, the pdb front end, and the factory that picks one
    diff_show     the diff's rich table and progress bar
    diff_html     the diff's self-contained HTML page
    wiring        the composition root
"""
