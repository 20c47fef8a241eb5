"""The bytecode stepper's tests run once per mechanism this torch offers (`dynstep.bytecode.mechanism`).

On torch 2.12 and 2.13 that is twice: torch's bytecode-debugger callback with torch's stack reader, and
Dynamo's bytecode hook with dynstep's native reader (what torch 2.11 gets), forced through
DYNSTEP_BYTECODE_MECHANISM, which subprocesses (`dynstep run --step-bytecode`, the pty REPL)
inherit. On a torch without the callback only the hook runs: no test is skipped for a missing hook.
"""

from __future__ import annotations

import pytest

from dynstep import _compat


def available_mechanisms() -> list[str]:
    out = [] if _compat.bytecode_hooks_missing() is not None else ["callback"]
    return out + ([] if _compat.bytecode_hook_missing() is not None else ["hook"])


@pytest.fixture(params=available_mechanisms())
def mechanism(request, monkeypatch) -> str:
    from dynstep.bytecode.mechanism import ENV, choose

    monkeypatch.setenv(ENV, request.param)
    chosen = choose()
    assert (chosen.codes, chosen.stack) == (request.param, "torch" if request.param == "callback" else "native")
    return request.param
