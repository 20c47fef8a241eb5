"""Inner compilers: how a graph is handed on to the compiler superstep wraps (`inner`), with or
without AOTAutograd's partitioned graphs given back for rewriting. Engine code, used by the
`superstep` backend (`backends/superstep.py`), the diff engine's rungs and root cause
(`dynstep.eagerdiff`); depends on `core` and `_compat` only."""
