"""The vocabulary every other part of dynstep speaks, and nothing else.

errors (what dynstep raises), records (Snapshot, Stats, GraphRow), sites (what a probe or stop
point in a compiled graph stands for), events (typed, emitted by the engine, shown by a front end),
options (superstep's options and the DYNSTEP_* switches), commands (the one command dispatcher of
the three command sets), wiring (the slots the composition root fills with front ends), once (run
a setup function once, thread-safely).

Depends on nothing inside dynstep; `torch` only where a record holds a tensor.
"""
