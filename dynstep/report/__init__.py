"""Reports of a run: what a report of a recording is made of, and its exports.

The engine side of `dynstep report` (the page, the terminal summary and the CLI verb are front
ends, in `dynstep.front`; the recording it reads is `dynstep.recording`). Above `recording`.

    model        the report of a recording: run summary, per-site series, first non-finite, graphs
    text         the report's words, shared by its page and its terminal summary (summary rows, lines)
    page_data    the numbers the page draws and lists: a series reduced for its chart, the hits table
    histogram    one recorded tensor's distribution (a panel's most telling hit)
    leadup       a flight recorder's dump: per-module curves over the steps before its trigger
    export       the report as JSON, and scalars and histograms for TensorBoard (no tensorboard needed)
    tlparse      running tlparse on a TORCH_TRACE folder
"""

