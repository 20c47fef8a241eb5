"""torch.compile backends shipped with dynstep (installed as `dynstep.backends`).

    torch.compile(model, backend="superstep", options={"probe": ["module:blocks.*"]})
"""
