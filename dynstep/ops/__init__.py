"""The dynstep operators: `schema` (definitions, fake kernels, effects; importing it registers no
kernel and builds nothing) and `native` (the best-effort loader of the csrc/ kernels).

Kernels are added by their owners: `dynstep.probe.registration` (probe, grad_tap, grad_tap_bw),
`dynstep.step.registration` (pause) and `dynstep.step.breakpoints` (breakpoint).
"""
