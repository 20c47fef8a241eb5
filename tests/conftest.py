"""Shared test setup: one Inductor cache for the run, a fresh Dynamo and stepper per test, small models."""

from __future__ import annotations

import faulthandler
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

from . import reaper  # noqa: E402


# every test module pytest started collecting in this run (tests/test_collection.py compares it with the disk)
STARTED_MODULES: set[str] = set()


def pytest_collectstart(collector):
    if isinstance(collector, pytest.Module):
        STARTED_MODULES.add(str(collector.path))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` that survives a worker dying in a test (tests/xdist_recovery.py says why)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from .xdist_recovery import RecoveringLoadFile

    return RecoveringLoadFile(config, log)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):     # the controller, or a run without workers
        reaper.new_run()
    global _STACKS
    _STACKS = os.fdopen(os.dup(sys.stderr.fileno()), "w")   # the real stderr (output capture is off now)


# Where a test that runs into its time limit (pytest-timeout, [tool.pytest.ini_options] in pyproject.toml)
# has every thread's stack printed, shortly before the limit ends its worker: pytest-timeout prints them
# too, but an xdist worker's terminal output is lost with it, while this file is the run's own stderr.
_STACKS = None
STACKS_BEFORE_S = 5.0


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item, settings):
    if _STACKS is not None and settings.timeout and settings.timeout > 2 * STACKS_BEFORE_S:
        faulthandler.dump_traceback_later(settings.timeout - STACKS_BEFORE_S, file=_STACKS)
    # None: pytest-timeout's own timer is set as well


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_cancel_timer(item):
    faulthandler.cancel_dump_traceback_later()


def pytest_sessionstart(session):
    """Build dynstep's native kernel once, before any test (in a child process: this one's state is the
    tests' own), so that no test's time limit pays for a first build. Under pytest-xdist every worker
    asks; the first builds and the others wait on the build lock (ops/buildlock.py), then load it.
    A worker that replaces one that died first ends what the dead one's test left running."""
    _report_reaped(reaper.reap_orphans(), "a test of a worker that died")
    subprocess.run([sys.executable, "-c", "from dynstep.ops import native; native.load()"], timeout=1200,
                   capture_output=True, check=False)


def pytest_sessionfinish(session):
    _report_reaped(reaper.reap_orphans(everything=not hasattr(session.config, "workerinput")), "this run")


_REAP_TAG = pytest.StashKey[str]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Every process the test starts carries its tag (tests/reaper.py)."""
    item.stash[_REAP_TAG] = os.environ[reaper.VAR] = reaper.new_tag()
    try:
        yield
    finally:
        os.environ.pop(reaper.VAR, None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    """After the test and its fixtures: kill what it left running, and say so."""
    yield
    tag = item.stash.get(_REAP_TAG, None)
    killed = reaper.reap(tag) if tag else []
    if killed:
        item.warn(pytest.PytestWarning(f"the test left {len(killed)} process(es) running; killed: "
                                       + "; ".join(killed)))


def _report_reaped(killed: list[str], whose: str) -> None:
    if killed:
        sys.stderr.write(f"tests/conftest.py: killed {len(killed)} process(es) left by {whose}: {'; '.join(killed)}\n")


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


def spawn_dynstep(*args: str, timeout: int = 120, cwd: str | None = None, home: str | None = None):
    """`python -m dynstep ARGS` in a real pseudo-terminal (pexpect), plain text, this checkout's dynstep,
    no DYNSTEP_* variable of the test run's own; started in `cwd` (default: the checkout) with HOME at
    `home` (default: the temp folder). Every pty test starts dynstep through here."""
    import sys

    import pexpect

    from dynstep.ops.native import cache_root

    # HOME moves, so the native kernel's cache is named: the one pytest_sessionstart built (a fresh
    # machine has no other; a build inside a test would eat its time limit)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNSTEP_")}
    env.update({"PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "TERM": "dumb",
                "NO_COLOR": "1", "COLUMNS": "160", "PYTHONUNBUFFERED": "1",
                "HOME": home or os.environ.get("TMPDIR", "/tmp"), "DYNSTEP_CACHE_DIR": str(cache_root()),
                "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/dynstep-inductor-cache")})
    return pexpect.spawn(sys.executable, ["-m", "dynstep", *args], cwd=cwd or ROOT, env=env, encoding="utf-8",
                         timeout=timeout, dimensions=(50, 160))
