"""Run-time probes: what a probe does when it fires (`runtime`), native rings and the record memory
cap (`rings`), statistics (`stats`), the direct call from Inductor's wrapper (`fastpath`), sessions and
recordings, `TensorProbe` (`api`), the on/off switch (`switch`) and the probe ops' kernels (`kernel`)."""
