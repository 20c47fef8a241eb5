"""The Debug Adapter Protocol: a server inside the debugged process, the job's adapter, a client.

VS Code (or any DAP client, or `dynstep attach HOST:PORT`) attaches to it and pauses, steps, logs
and injects inside compiled graphs through the runtime stepper:

    dynstep run --dap 5679 --wait train.py        # or DYNSTEP_DAP=5679, or dynstep.serve_dap(5679)

    protocol     Content-Length framing, JSON, one writer thread per client
    session      one client's session: its order (initialize, attach, configurationDone), the token
    endpoint     a port serving one client at a time: accept and reader threads, the session's
                 requests, disconnect and terminate (the server's and the job adapter's alike)
    server       the endpoint in the debugged process: dispatch, holding a stopped program thread
    requests     the server's session requests (breakpoints, threads, pause, source, terminate, ...)
    client_breaks the client's source and function breakpoints as selectors; conditions, hit counts, logpoints
    stopview     a runtime stop as frames, scopes and variables; evaluate; inject (setVariable)
    compileview  dynstep.breakpoint()'s compile-time stop
    bytecodeview a stop in Dynamo's bytecode (--step-bytecode): instruction listing, disassemble
    variables    values as DAP variables (tensors: shape, dtype, device, stats, paged rows)
    sources      virtual sources: graph listings, the graph so far, guards
    frontend     the stepper's front end for a client (`DapFrontend`), the output-event sink
    client       a small DAP client (`dynstep attach`, tests, the job's adapter)
    job, jobids, jobworkers   the job's adapter (an endpoint): the ranks of a torchrun node as threads
                 of one session
    api          serve_dap(), DYNSTEP_DAP

Engine only: no rich, no front-end import; it reaches the stepper through `dynstep.core.wiring`.
"""
