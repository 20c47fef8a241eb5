"""Every private torch API in dynstep/_compat.py exists on the installed torch (an upgrade breaks here)."""

import torch

from dynstep import _compat


def test_private_apis_exist():
    import torch._dynamo.backends.debugging as dbg
    import torch._inductor.compile_fx as cfx
    from torch._guards import CompileContext

    assert callable(cfx.compile_fx) and callable(cfx.compile_fx_inner)
    assert "inner_compile" in cfx.compile_fx.__code__.co_varnames
    assert callable(dbg.aot_eager) and callable(dbg.boxed_nop)
    assert hasattr(CompileContext, "current_compile_id")
    assert hasattr(torch, "_TorchCompileInductorWrapper")
    assert callable(torch.library._register_effectful_op)
    assert _compat.qualified_name(torch.relu) == "torch.relu"
    assert _compat.has_kernel("aten::add.Tensor", "CPU")


def test_mode_config_matches_torch():
    assert _compat.inductor_config_for_mode(None) == {}
    assert _compat.inductor_config_for_mode("max-autotune-no-cudagraphs")["max_autotune"] is True
