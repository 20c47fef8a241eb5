"""Issue 27 item 2: one command table per command set (dynstep/core/command_table.py) serves the REPL,
the DAP's resume requests, the DAP console and `dynstep attach`; `set` has a typed core (`assign`)
the DAP's setVariable calls with the value in hand."""

from __future__ import annotations

import pytest
import torch

from dynstep.bytecode.stepper import BytecodeStepper
from dynstep.core.command_table import BYTECODE_STOP, COMPILE_STOP, NODE_STOP
from dynstep.core.commands import names
from dynstep.core.events import Info, use_sink
from dynstep.core.sites import Site
from dynstep.dap import stopview
from dynstep.step.commands import StepperCommands
from dynstep.step.compile_stop import CompileStopCommands
from dynstep.step.stepper import Stepper, Stop


@pytest.mark.parametrize("table, cls", [(NODE_STOP, StepperCommands), (BYTECODE_STOP, BytecodeStepper),
                                        (COMPILE_STOP, CompileStopCommands)])
def test_each_table_names_exactly_its_command_sets_commands(table, cls):
    assert set(table.commands) == set(names(cls))
    assert dict(cls.aliases) == dict(table.aliases)
    assert cls.without_stop == table.without_stop
    for alias, full in table.aliases.items():
        assert full in table.commands and alias not in table.commands, alias


def test_dap_resume_requests_mean_what_the_table_says():
    assert [NODE_STOP.for_request(r) for r in ("continue", "next", "stepIn", "stepOut")] == \
        ["continue", "step", "next", "out"]
    assert BYTECODE_STOP.for_request("next") == "next"
    assert BYTECODE_STOP.for_request("next", {"granularity": "instruction"}) == "step"
    assert BYTECODE_STOP.for_request("next", {"granularity": "line"}) == "next"
    assert [BYTECODE_STOP.for_request(r) for r in ("stepIn", "continue", "stepOut")] == ["step", "continue", "continue"]
    with pytest.raises(LookupError, match="'evaluate' does not resume a program at a node stop; these do: continue"):
        NODE_STOP.for_request("evaluate")
    every_resume = {r.split(":")[0] for c in NODE_STOP.commands.values() for r in c.dap}
    assert every_resume == {"continue", "next", "stepIn", "stepOut"}
    assert all(NODE_STOP.commands[NODE_STOP.for_request(r)].resumes for r in every_resume)


def test_attach_and_the_dap_console_read_the_same_table():
    """`dynstep attach` sends the request the server maps back to the same command; the DAP console
    refuses what the client's buttons do, by every alias."""
    for typed in ("c", "cont", "continue", "s", "step", "n", "next", "out"):
        request = NODE_STOP.request_for(typed)
        assert request is not None and NODE_STOP.for_request(request) == NODE_STOP.name_of(typed), typed
    assert NODE_STOP.request_for("p") is None and NODE_STOP.request_for("set") is None
    assert {"c", "cont", "s", "n", "out", "q", "exit"} <= stopview.RESUME_COMMANDS
    assert "p" not in stopview.COMMAND_WORDS and {"cl", "b", "w", "g", "?"} <= stopview.COMMAND_WORDS


def _stop(stepper: Stepper) -> Stop:
    site = Site(id=10_001, kind="pause", probe="pause", node="relu", target="relu", module="", source="m.py:3",
                source_text="y = x.relu()", graph="g[0/0]", actions=("pause",), capacity=1)
    value = torch.zeros(3)
    stop = Stop(site=site, value=value, inputs={"x": torch.ones(3)}, reason="pause", call=0, writable=True,
                stack=())
    stepper.current = stop
    return stop


def test_assign_is_set_with_the_value_in_hand():
    stepper = Stepper()
    events: list[object] = []
    with use_sink(events.append):
        stop = _stop(stepper)
        stepper.assign("value", torch.tensor([1.0, 2.0, 3.0]))
        assert stop.value.tolist() == [1.0, 2.0, 3.0]
        stepper.assign("scale", 3)                       # any other name: bound for later commands
        assert stepper.evaluate("scale * 2") == 6
        with pytest.raises(ValueError, match="already used"):
            stepper.assign("x", torch.zeros(3))          # an input already consumed by the node
        stepper.execute("set value = value * 2")         # the command line parses, then assigns
        assert stop.value.tolist() == [2.0, 4.0, 6.0]
        stepper.current = None
        with pytest.raises(ValueError, match="not stopped"):
            stepper.assign("value", 0)
    assert any(isinstance(e, Info) and "replaced" in e.message for e in events)


def test_the_runtime_stepper_holds_its_commands_and_they_change_its_state():
    """Issue 27 item 1: the REPL's commands are an object holding the stepper (composition, not a
    mixin); the stepper's own calls hand over to it, and the state they change is the stepper's."""
    stepper = Stepper()
    assert not isinstance(stepper, StepperCommands) and stepper.commands.stepper is stepper
    assert not any(n.startswith("cmd_") for n in dir(stepper))
    stop = _stop(stepper)
    stepper.current = stop
    try:
        events: list = []
        with use_sink(events.append):
            assert stepper.execute("b op:relu") is False and "op:relu" in stepper.breakpoints
            assert stepper.execute("watch value.sum()") is False and stepper.watches == ["value.sum()"]
            assert stepper.execute("n") is True and (stepper.mode, stepper.next_graph) == ("next", "g[0/0]")
            assert stepper.run_command("continue") is True and stepper.mode == "run"
        assert float(stepper.evaluate("x.sum()")) == 3.0
    finally:
        stepper.current = None
