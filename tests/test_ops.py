import torch

import dynstep.ops as ops


def test_probe_op_passes_opcheck():
    from dynstep.sites import SITES

    site = SITES.add(kind="value", probe="test", node="n", target="t", module="", source="", source_text="",
                     graph="g", actions=("summary",), capacity=4)
    for x in (torch.randn(3, 4), torch.randn(3, 4, requires_grad=True), torch.randn(4, 6)[:, ::2]):
        torch.library.opcheck(torch.ops.dynstep.probe.default, (x, site.id))
        torch.library.opcheck(torch.ops.dynstep.grad_tap.default, (x, site.id))


def test_probe_is_an_ordered_effect_without_cudagraph_unsafe_tag():
    from dynstep import _compat

    assert _compat.effect_of(ops.probe) is not None
    assert torch.Tag.cudagraph_unsafe not in ops.probe.tags


def test_doctor_lists_kernels():
    kernels = ops.registered_kernels()
    assert "CompositeExplicitAutograd" in kernels["probe"]
