"""Every front end: what the user types and sees. The only part of dynstep that prints or imports
rich; the engine reaches it only through `dynstep.core.wiring` (filled by `wiring.install`, the
composition root) and typed events.

    cli           the `dynstep` command (demo, doctor, run, diff, report)
    runner        `dynstep run`: a script with every torch.compile routed through superstep
    doctor, demo  `dynstep doctor`, `dynstep demo` (and the demo's TinyGPT)
    console       probe prints, warnings, snapshot tables
    repl          the terminal REPL of the stepper and the rendering of stepper events
    bytecode_repl the rendering of the bytecode stepper's events
    frontends     scripted commands, the pdb front end, and the factory that picks one
    diff_show     the diff's rich table and progress bar
    diff_html     the diff's self-contained HTML page
    report_cli    `dynstep report`: the verb; report_html, report_charts, report_assets, report_leadup: its
                  page; report_show: its terminal summary and `dynstep run`'s graph breaks (what they say and
                  show is built in `dynstep.report`: text, page_data, model)
    pytest_plugin `pytest --dynstep-compare=BACKEND` (entry point pytest11; imports no torch when loaded)
    wiring        the composition root
"""
