"""The dynstep operators: `schema` (definitions, fake kernels, effects; importing it registers no
kernel and builds nothing) and `native` (the best-effort loader of the csrc/ kernels).

Kernels are added by their owners: `dynstep.probe.kernel` (probe, grad_tap, grad_tap_bw) and
`dynstep.step.kernel` (pause, breakpoint).
"""
