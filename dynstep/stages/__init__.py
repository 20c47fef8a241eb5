"""Every stage of what was compiled, for one run: Dynamo's graph, AOTAutograd's graphs, Inductor's
post-grad graph and output code, and the code Dynamo wrote, each line tied to its nodes and the
user's line.

    capture   the stages as torch writes them into its structured trace (STAGES, capturing())
    annotate  each line's FX nodes and user line (FX comments, Inductor's provenance)
    view      `code [stage]` at a stop: one stage, the current node's lines marked
    dump      `dynstep run --dump DIR`: every stage as files, with an index
    records   Stage, LineMark, StageShown (what crosses to front ends)
"""
