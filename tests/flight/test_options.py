"""The flight option from a call and from DYNSTEP_FLIGHT*: what fills in what, and what is refused."""

from __future__ import annotations

import pytest

from dynstep.core.errors import OptionsError
from dynstep.core.flight_options import DEFAULT_ON, DEFAULT_PATH, FlightOptions, SpikeRule
from dynstep.core.options import Options, check_environment


def flight(given=None, **env):
    return Options.from_mapping({} if given is None else {"flight": given}, environ=env).flight


def test_true_gives_the_defaults_and_off_is_none():
    assert flight(True) == FlightOptions(steps=64, on=DEFAULT_ON, path=DEFAULT_PATH, select=("*",))
    assert flight() is None and flight(False) is None
    assert Options.from_mapping({}, environ={}).transparent
    assert not Options.from_mapping({"flight": True}, environ={}).transparent


def test_dynstep_flight_dir_turns_it_on_and_the_rest_fills_in():
    opts = flight(DYNSTEP_FLIGHT="dumps/", DYNSTEP_FLIGHT_STEPS="8", DYNSTEP_FLIGHT_ON="nonfinite,spike:loss:3",
                  DYNSTEP_FLIGHT_SELECT="module:**,op:linear", DYNSTEP_FLIGHT_INPUTS="64M")
    assert opts == FlightOptions(steps=8, on=("nonfinite", "spike:loss:3"), path="dumps/",
                                 select=("module:**", "op:linear"), inputs=64 << 20)
    assert opts.spikes == (SpikeRule("loss", 3.0),) and opts.nonfinite == "any" and not opts.signals
    assert flight(DYNSTEP_FLIGHT="1").path == DEFAULT_PATH and flight(DYNSTEP_FLIGHT="0") is None


def test_the_call_wins_over_the_environment():
    assert flight({"steps": 4}, DYNSTEP_FLIGHT="env/", DYNSTEP_FLIGHT_STEPS="9") == FlightOptions(steps=4, path="env/")
    assert flight({"path": "call/"}, DYNSTEP_FLIGHT="env/").path == "call/"
    assert flight(False, DYNSTEP_FLIGHT="env/") is None
    assert flight({"on": ["nonfinite:value"]}).nonfinite == "value"


@pytest.mark.parametrize("env, match", [({"DYNSTEP_FLIGHT_STEPS": "0"}, "DYNSTEP_FLIGHT_STEPS"),
                                        ({"DYNSTEP_FLIGHT_ON": "loud"}, "unknown trigger rule 'loud'"),
                                        ({"DYNSTEP_FLIGHT_INPUTS": "-5"}, "DYNSTEP_FLIGHT_INPUTS")])
def test_bad_environment_values_are_refused_by_the_environment_check(env, match):
    with pytest.raises(OptionsError, match=match):
        check_environment(env)


def test_dynstep_run_flight_reaches_a_torchrun_jobs_workers_through_the_environment(tmp_path):
    from dynstep.front.jobs_cli import environment

    env = environment({"flight": {"path": str(tmp_path), "steps": 8, "on": ["nonfinite", "spike:loss"],
                                  "select": ["module:**"]}}, {})
    assert env == {"DYNSTEP_FLIGHT": str(tmp_path), "DYNSTEP_FLIGHT_STEPS": "8",
                   "DYNSTEP_FLIGHT_ON": "nonfinite,spike:loss", "DYNSTEP_FLIGHT_SELECT": "module:**"}
    assert flight(**env) == FlightOptions(steps=8, on=("nonfinite", "spike:loss"), path=str(tmp_path),
                                          select=("module:**",))
