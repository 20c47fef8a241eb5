"""Run-time probes: what a probe does when it fires (`runtime`), native rings and the record memory
cap (`rings`), statistics (`stats`), the direct call from Inductor's wrapper (`fastpath`), sessions
(`sessions`: they write recordings through `dynstep.recording`), `TensorProbe` (`api`), the on/off
switch (`switch`) and registering the probe ops' kernels (`registration`)."""
