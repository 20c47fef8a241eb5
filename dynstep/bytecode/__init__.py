"""The bytecode stepper: step through the code Dynamo wrote, and from it into the compiled graph.

    with dynstep.step_bytecode():                       # REPL on a terminal
        cfn(x, d, log)
    with dynstep.step_bytecode(commands="s; stack; n; c"):   # scripted (or DYNSTEP_COMMANDS)
        cfn(x, d, log)

It stops at the first instruction of the first Dynamo-produced code object that runs (the
transformed function, a resume function after a graph break, and code compiled before the
context was entered when it runs again). `s` runs one instruction; at the instruction that
calls the compiled graph (``__compiled_fn_*``) `s` goes on at node level in the runtime stepper
(`dynstep.step.stepper.STEPPER`, the same front end and command script), and stepping past the last
node comes back to the instruction after the call. `n` runs to the next instruction of this
frame that starts another source line or another part of Dynamo's output (graph call, side-effect
replay, graph break, resume call), without stopping in calls.

To step into graphs they must have step points: while the context is open every graph Dynamo
compiles goes through superstep (``step=True``) with the user's own backend as the inner
compiler (`_compat.wrap_dynamo_compiler`). Graphs compiled before keep running as they were;
`s` at their call says so and steps over them. The engine never prints; it emits events
(`dynstep.bytecode.events`) that the front end renders (`dynstep.front.bytecode_repl`).

    api        step_bytecode(), active()
    mechanism  which hooks this torch and Python get (torch's debugger callback and stack reader, or
               Dynamo's bytecode hook and dynstep's native reader); DYNSTEP_BYTECODE_MECHANISM
    stepper    the engine: where the program is, when to stop
    commands   the commands at a bytecode stop
    code       what a Dynamo-produced code object is made of (rows, regions, stack depths)
    hooks      where Dynamo's code objects come from (callback or bytecode hook), installed and removed
    tracing    per-instruction events (settrace / sys.monitoring), standard library only
    framestack builds and loads csrc/frame_stack.c, the native value-stack reader, standard library only
    views      source, bytecode and decompiled views as events
    events     the typed events of this room
"""

from __future__ import annotations

from .api import active, check_supported, step_bytecode

__all__ = ["active", "check_supported", "step_bytecode"]
