"""Shared test setup: one Inductor cache for the run, a fresh Dynamo and stepper per test, small models."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "dynstep-inductor-cache"))
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# a test setting, not a dynstep switch: a second Python with another torch (tests/crossrun), read before the clean-up
OTHER_TORCH_PYTHON = os.environ.get("DYNSTEP_OTHER_TORCH_PYTHON", "").strip()
for key in [k for k in os.environ if k.startswith("DYNSTEP_")]:
    del os.environ[key]

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


# every test module pytest started collecting in this run (tests/test_collection.py compares it with the disk)
STARTED_MODULES: set[str] = set()


def pytest_collectstart(collector):
    if isinstance(collector, pytest.Module):
        STARTED_MODULES.add(str(collector.path))


def pytest_sessionstart(session):
    """Build dynstep's native kernel once, before any test (in a child process: this one's state is the
    tests' own), so that no test's time limit pays for a first build. Under pytest-xdist every worker
    asks; the first builds and the others wait on the build lock (ops/buildlock.py), then load it."""
    subprocess.run([sys.executable, "-c", "from dynstep.ops import native; native.load()"], timeout=1200,
                   capture_output=True, check=False)


@pytest.fixture(autouse=True)
def _fresh_compile_state():
    from dynstep.step.stepper import STEPPER

    torch._dynamo.reset()
    STEPPER.reset()
    yield
    STEPPER.reset()
    torch._dynamo.reset()


@pytest.fixture
def events():
    from dynstep.core.events import use_sink

    seen: list[object] = []
    with use_sink(seen.append):
        yield seen


class MLP(nn.Module):
    def __init__(self, dim: int = 8, hidden: int = 16, out: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, out)

    def forward(self, x):
        h = self.act(self.fc1(x))
        return self.fc2(h)


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return MLP(), torch.randn(4, 8)


@pytest.fixture
def gpt():
    from dynstep.front.demo.model import make

    return make(seed=0, layers=2)


def module_outputs_eager(model: nn.Module, x, names):
    """What forward hooks see on the given modules in an eager run: {name: [tensor per call]}."""
    seen: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    handles = [dict(model.named_modules())[n].register_forward_hook(
        lambda mod, inp, out, n=n: seen[n].append(out.detach().clone())) for n in names]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spawn_dynstep(*args: str, timeout: int = 120):
    """`python -m dynstep ARGS` in a real pseudo-terminal (pexpect), plain text, this checkout's dynstep."""
    import sys

    import pexpect

    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "TERM": "dumb",
           "NO_COLOR": "1", "COLUMNS": "160", "HOME": os.environ.get("TMPDIR", "/tmp"),
           "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache")}
    env.pop("DYNSTEP_COMMANDS", None)
    return pexpect.spawn(sys.executable, ["-m", "dynstep", *args], cwd=ROOT, env=env, encoding="utf-8",
                         timeout=timeout, dimensions=(50, 160))
