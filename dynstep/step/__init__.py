"""The runtime stepper and `dynstep.breakpoint()`: stop inside a compiled graph, look, change, go on.

    stepper      the state between stops (STEPPER), what `dynstep::pause` does, who answers a stop
    commands     the commands at a stop (print, set, step, next, break, watch, ...)
    graphs       the run-time registry of graphs with stop points (listings, `break SEL` sites)
    variants     a graph compiled with and without stop points, chosen per call
    registration registering the pause op's kernel, and the stepper's connection to the probe runtime
    breakpoints  dynstep.breakpoint(): the compile-time hook and the breakpoint op's kernel
    compile_stop what Dynamo knows at a breakpoint's line, and the compile-time commands
    bp_stops     where a breakpoint's two stops go; dynstep.configure()
    values       how a stop shows values (shared with the bytecode stepper)

Engine only: it emits typed events and asks `dynstep.core.wiring` for a front end.
"""
