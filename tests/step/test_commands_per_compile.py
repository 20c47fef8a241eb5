"""Scripted `commands` belong to each torch.compile call's options (issue 25 defect 3).

The stepper used to keep one script per process: a second torch.compile with the same `pause` and
`commands` stopped, found the script ran out, skipped `set`, and silently returned the unchanged output.
"""

from __future__ import annotations

import torch

from dynstep.core.events import Info, Stopped

OPTIONS = {"inner": "aot_eager", "pause": ["module:fc2"], "commands": "set value = value * 0; c"}


def zeroed(out: torch.Tensor) -> bool:
    return bool((out == 0).all())


def test_scripted_commands_run_once_per_compile_not_once_per_process(mlp, events):
    model, x = mlp
    with torch.no_grad():
        first = torch.compile(model, backend="superstep", options=dict(OPTIONS))(x)
        torch._dynamo.reset()
        second = torch.compile(model, backend="superstep", options=dict(OPTIONS))(x)
    assert zeroed(first) and zeroed(second)
    assert len([e for e in events if isinstance(e, Stopped)]) == 2
    assert not [e for e in events if isinstance(e, Info) and "ran out" in e.message]


def test_a_loop_over_models_sharing_one_options_dict_runs_the_script_for_each(mlp, events):
    from tests.conftest import MLP

    shared = dict(OPTIONS)
    outs = []
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        with torch.no_grad():
            outs.append(torch.compile(MLP(), backend="superstep", options=shared)(mlp[1]))
    assert all(zeroed(o) for o in outs)


def test_the_graphs_of_one_compile_share_its_script(events):
    """A graph break: two graphs, one torch.compile call, one script that reaches across both."""
    def fn(x):
        y = torch.sin(x) * 3
        torch._dynamo.graph_break()
        return torch.cos(y) + 1

    cm = torch.compile(fn, backend="superstep", options={"inner": "eager", "pause": ["op:sin", "op:cos"],
                                                           "commands": "set value = value * 0; c; c"})
    out = cm(torch.ones(3))
    assert [e.site.target for e in events if isinstance(e, Stopped)] == ["torch.sin", "torch.cos"]
    torch.testing.assert_close(out, torch.full((3,), 2.0))          # cos(0) + 1: the first `set` ran once
    assert [e for e in events if isinstance(e, Info) and "ran out" in e.message] == []
