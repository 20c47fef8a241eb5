"""The native kernel is optional: where it cannot be built, the Python kernel serves, and says why once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_an_unwritable_kernel_cache_falls_back_to_the_python_kernel(tmp_path):
    """Issue 14 item 5: an unwritable cache made the first compile fail (FileNotFoundError) and every
    later one fail with "Only a single TORCH_LIBRARY ..."; doctor died with a traceback."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should go")
    env = {**os.environ, "DYNSTEP_CACHE_DIR": str(blocker / "cache")}
    env.pop("DYNSTEP_NATIVE", None)
    script = textwrap.dedent("""
        import warnings, torch, dynstep
        f = torch.compile(lambda x: torch.tanh(x) * 2, backend="superstep",
                          options={"inner": "eager", "probe": ["op:tanh"], "actions": ["record"]})
        with warnings.catch_warnings(record=True) as caught, dynstep.session() as s:
            warnings.simplefilter("always")
            for i in range(3):
                f(torch.full((2,), float(i)))
            torch.compile(lambda x: torch.sin(x), backend="superstep",
                          options={"inner": "eager", "probe": ["op:sin"]})(torch.ones(2))
        print(len(s.records()), sum("DYNSTEP_CACHE_DIR" in str(w.message) for w in caught))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["4", "1"]          # every hit recorded, one warning
    doctor = subprocess.run([sys.executable, "-m", "dynstep", "doctor"], capture_output=True, text=True,
                            timeout=300, env=env)
    assert "Traceback" not in doctor.stderr
    assert "not writable" in doctor.stdout and "DYNSTEP_CACHE_DIR" in doctor.stdout
