import torch

from dynstep.ops import schema as ops
from dynstep.probe import registration


def test_importing_the_schema_registers_no_kernel_and_builds_nothing():
    """Kernels come from their owners (dynstep.probe.registration, dynstep.step.registration), not the schema."""
    import subprocess
    import sys

    code = ("import sys, torch; from dynstep.ops import schema; from dynstep import _compat; "
            "print(_compat.has_kernel('dynstep::probe', 'CompositeExplicitAutograd'), "
            "_compat.has_kernel('dynstep::probe', 'CPU'), 'dynstep.ops.native' in sys.modules, "
            "'torch._inductor.codegen.custom_extern_kernel_codegen' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False", "False"]


def test_probe_op_passes_opcheck():
    from dynstep.core.sites import SITES

    registration.ensure()
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
