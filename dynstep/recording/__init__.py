"""Recordings: the format on disk, how it is written and read. Below `probe` (sessions write
through it) and `report` (a report is built from one); above `graph`, `jobs`, `core` and `_compat`.

    storage       writing: a streaming `Writer` and `save`; the manifest, the lock, putting a
                  recording in place without deleting what dynstep did not write
    reader        `dynstep.load(path)` -> `Recording` (every line checked; problems listed, never raised)
    files         reading a recording's files: never through a link, never waiting on a FIFO
    facts         what a recording keeps besides snapshots (`CompileEvent`, `GraphPlan`, `RunInfo`) and
                  their checked JSON form
    flight_facts  a flight recorder's dump: its trigger and window (flight.json)
    plans         what superstep placed in a graph, as a `GraphPlan` (and its tlparse artifacts)
    paths         where each rank of a distributed job records (``run.dynstep/rank<N>/``)
    compile_log   the process's compile log (graph breaks, recompiles, compiles, graph plans, kernel
                  counts) and its collector on torch's structured trace
    trace_events  torch's structured-trace records read as compile events

The snapshots themselves (`Snapshot`, `Stats`) are `dynstep.core.records`.
"""
