"""Reading compiled graphs as the user wrote them: node facts (`info`: module path, source frames,
op names), selectors (`selectors`: which values a selector string picks in an FX graph) and
snapshot filtering (`filter`: which recorded hits a selector names).

Compile-time only, engine only; depends on `dynstep.core` and torch.fx.
"""
