"""What `dynstep run --dump` needs from torch besides its structured trace: compiles that produce
every stage.

    with fresh_compiles():      # AOTAutograd and Inductor compile for real: no cache hit skips a stage
        torch.compile(f)(x)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def fresh_compiles() -> Iterator[None]:
    # torch/_inductor/config.py: fx_graph_cache (a hit loads the output code without running the
    # post-grad passes, so no inductor_post_grad_graph artifact); torch/_functorch/config.py:
    # enable_autograd_cache (a hit skips tracing the joint, forward and backward graphs). Both are
    # torch.utils._config_module patches, restored on exit.
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"fx_graph_cache": False}), functorch_config.patch({"enable_autograd_cache": False}):
        yield
