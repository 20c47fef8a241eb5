"""Reports of a run: what a recording keeps besides snapshots, and what a report is made of.

The engine side of `dynstep report` (the page, the terminal summary and the CLI verb are front
ends, in `dynstep.front`). This room sits above `graph` and below `probe`: sessions start its
collector and recordings keep its records.

    records      CompileEvent, GraphPlan (PlanRow, PlanSite), RunInfo; their JSON form
    trace_events torch's structured-trace records read as compile events (graph breaks, recompiles)
    compile_log  the process's compile log and `collecting()`, the handler on torch's trace logger
    plans        what superstep placed in a graph, as a GraphPlan (and its tlparse artifacts)
    model        the report of a recording: run summary, per-site series, first non-finite, graphs
    histogram    one recorded tensor's distribution (a panel's most telling hit)
    export       the report as JSON, and scalars and histograms for TensorBoard (no tensorboard needed)
    tlparse      running tlparse on a TORCH_TRACE folder
"""
