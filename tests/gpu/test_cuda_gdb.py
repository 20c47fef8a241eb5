"""`dynstep gdb --cuda`: a node computed by an Inductor Triton kernel, `native break` under cuda-gdb,
and cuda-gdb stopped in that kernel. Needs a GPU, a CUDA-enabled torch and cuda-gdb; skipped
otherwise. Results on a GPU: docs/gpu-validation.md."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(shutil.which("cuda-gdb") is None, reason="needs cuda-gdb (the CUDA toolkit's bin/ on PATH)"),
]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from dynstep.front.demo.model import make

    model, idx = make(layers=1)
    model, idx = model.eval().cuda(), idx.cuda()
    compiled = torch.compile(model)
    with torch.no_grad():
        for step in range(2):
            out = compiled(idx)
    torch.cuda.synchronize()
    print("finished", flush=True)
    sys.exit(3)
""")


def test_native_break_stops_cuda_gdb_in_the_nodes_triton_kernel(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": ROOT, "DYNSTEP_GDB_AT_HIT": "info cuda kernels"}
    r = subprocess.run([sys.executable, "-m", "dynstep", "gdb", "--cuda", "--batch", "--pause", "node:h",
                        "--commands", "native; native break", "train.py"], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out[-5000:]
    assert re.search(r"triton\s+triton_\w*gelu\w*", r.stderr), r.stderr[-3000:]        # `native` named it
    assert "==== dynstep breakpoint hit 1" in out, out[-6000:]
    hit = out[out.index("==== dynstep breakpoint hit 1"):]
    kernel = re.search(r"\[dynstep\]   kernel\s+(triton_\w+) \(triton\)", hit).group(1)
    assert kernel in hit[hit.index("(gdb) info cuda kernels"):]                          # the kernel cuda-gdb is in
    assert "source      model.py:44" in hit and "finished" in r.stdout
