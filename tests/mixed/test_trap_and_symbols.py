"""The pieces under `native`: no trap without a debugger (ever), the hand-off, ELF names on a
release build, native_functions.yaml, and a graph compiled without provenance."""

from __future__ import annotations

import ctypes
import inspect
import json
import os

import pytest

from dynstep.core.sites import Site
from dynstep.mixed import aten, elf, lookup, trap
from dynstep.mixed.findings import BreakTarget, NativeKernel, NativeReport

SITE = Site(id=1, kind="pause", probe="node:h", node="h", target="torch.nn.functional.gelu", module="mlp",
            source="model.py:44", source_text="h = F.gelu(x)", graph="forward[0/0]", actions=("pause",), capacity=1)
KERNEL = NativeKernel(kind="cpp", name="cpp_fused_gelu_0", nodes=("h",), library="/x/c.so", address=0x1000,
                      targets=(BreakTarget(address=0x1000, size=64, library="/x/c.so", symbol="kernel"),))
REPORT = NativeReport(node="h", target="gelu", module="mlp", source="model.py:44", source_text="", graph="g",
                      compiler="inductor", kernels=(KERNEL,))


def test_no_tracer_no_trap(monkeypatch):
    monkeypatch.setattr(trap.signal, "pthread_kill", lambda *a: pytest.fail("trapped without a debugger"))
    assert trap.tracer() == (0, "")        # pytest runs untraced
    outcome = trap.trap(REPORT)
    assert not outcome.trapped and "TracerPid 0" in outcome.reason and outcome.commands == ("break *0x1000",)
    assert not os.path.exists(trap.handoff_path())


@pytest.mark.parametrize("name", ["strace", "ltrace", "?"])
def test_a_tracer_that_is_not_a_debugger_gets_no_trap(monkeypatch, name):
    monkeypatch.setattr(trap, "tracer", lambda: (4242, name))
    monkeypatch.setattr(trap.signal, "pthread_kill", lambda *a: pytest.fail("trapped under " + name))
    outcome = trap.trap(REPORT)
    assert not outcome.trapped and "not a debugger" in outcome.reason


def test_nothing_to_break_on_says_why(monkeypatch):
    monkeypatch.setattr(trap, "tracer", lambda: (4242, "gdb"))
    empty = NativeReport(node="q", target="view", module="", source="", source_text="", graph="g",
                         compiler="inductor", problems=("node q is a view",))
    outcome = trap.trap(empty)
    assert not outcome.trapped and "node q is a view" in outcome.reason


def test_with_gdb_attached_the_handoff_is_written_then_the_trap_raised(monkeypatch):
    monkeypatch.setattr(trap, "tracer", lambda: (4242, "gdb"))
    seen = {}

    def fake_kill(thread, sig):   # what gdb's side does: read, then delete
        with open(trap.handoff_path()) as f:
            seen.update(json.load(f))
        os.unlink(trap.handoff_path())
        seen["sig"] = sig

    monkeypatch.setattr(trap.signal, "pthread_kill", fake_kill)
    outcome = trap.trap(REPORT)
    assert outcome.trapped and outcome.handoff and seen["sig"] == trap.signal.SIGTRAP
    assert seen["node"]["source"] == "model.py:44" and seen["targets"][0]["address"] == 0x1000
    assert seen["targets"][0]["kernels"] == [0] and seen["kernels"][0]["name"] == "cpp_fused_gelu_0"


def test_debugger_names():
    assert all(trap.is_debugger(n) for n in ("gdb", "cuda-gdb", "gdbserver", "lldb", "cuda-gdb-python",
                                              "gdb-multiarch"))
    assert not any(trap.is_debugger(n) for n in ("strace", "python", "?"))


def test_elf_names_a_libc_function_and_demangles():
    address = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value
    symbol = elf.symbolize(address)
    assert "malloc" in symbol.name and symbol.library == os.path.realpath(symbol.library)
    assert symbol.start <= address < symbol.start + max(symbol.size, 1)
    assert elf.demangle("_ZN2at6native4geluERKNS_6TensorE") == "at::native::gelu(at::Tensor const&)"
    assert elf.demangle("not_mangled") == "not_mangled"
    assert elf.mangled_prefix("at::native::gelu") == "_ZN2at6native4geluE"
    assert elf.symbol_in("/no/such/library.so", "kernel") is None


def test_native_functions_yaml_follows_structured_delegates():
    assert aten.native_impl_names("aten::addmm", "", "CPU") == ["at::native::structured_addmm_out_cpu::impl"]
    assert aten.native_impl_names("aten::gelu", "", "CPU") == ["at::native::structured_gelu_out_cpu::impl"]
    assert aten.op_name("aten.addmm.default") == ("aten::addmm", "")
    assert aten.op_name("aten::mm.out") == ("aten::mm", "out")


def test_the_dispatcher_kernel_of_an_op_is_named_from_libtorch():
    k = aten.aten_kernel("aten::addmm.out")
    assert "wrapper_CPU_addmm_out" in k.wrapper and os.path.basename(k.library) == "libtorch_cpu.so"
    assert k.registered_at.startswith("RegisterCPU") and all(address for _, address, _ in k.entries)


def test_a_graph_compiled_without_provenance_says_how_to_get_it():
    # a stand-in for an Inductor wrapper's call() whose graph was compiled without provenance
    namespace = {"async_compile": object(), "inspect": inspect}
    exec("def call():\n    return inspect.currentframe()\n", namespace)
    report = lookup.native_report(SITE, frame=namespace["call"]())
    assert report.kernels == () and report.compiler == "inductor" and "dynstep gdb" in report.problems[0]


def test_no_compiled_graph_on_the_stack():
    report = lookup.native_report(SITE)
    assert report.compiler == "" and "no compiled graph is running" in report.problems[0]
