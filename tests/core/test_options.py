import pytest

from dynstep.core.errors import OptionsError
from dynstep.core.options import Options


def test_defaults_are_transparent():
    opts = Options.from_mapping(None, environ={})
    assert opts.transparent and opts.inner == "inductor" and opts.actions == ("summary",) and opts.record == 16


def test_mode_passes_through():
    assert Options.from_mapping({}, mode="max-autotune", environ={}).mode == "max-autotune"
    assert Options.from_mapping({"mode": "reduce-overhead"}, environ={}).mode == "reduce-overhead"


def test_environment_fills_and_extends():
    env = {"DYNSTEP_INNER": "aot_eager", "DYNSTEP_PROBE": "op:layer_norm, module:blocks.*",
           "DYNSTEP_ACTIONS": "record", "DYNSTEP_RECORD": "4", "DYNSTEP_GRADS": "1"}
    opts = Options.from_mapping({"probe": ["node:x"]}, environ=env)
    assert opts.inner == "aot_eager"
    assert opts.probe == ("node:x", "op:layer_norm", "module:blocks.*")
    assert opts.actions == ("record",) and opts.record == 4 and opts.grads
    # the call's explicit value wins over the environment for scalars
    assert Options.from_mapping({"inner": "eager"}, environ=env).inner == "eager"


def test_disable_switch_makes_it_transparent():
    opts = Options.from_mapping({"probe": ["*"]}, environ={"DYNSTEP_DISABLE": "1"})
    assert opts.transparent


@pytest.mark.parametrize("bad, fragment", [
    ({"probes": ["*"]}, "unknown superstep option"),
    ({"actions": ["summarise"]}, "unknown action"),
    ({"record": 0}, "positive integer"),
    ({"grads": "yes"}, "True or False"),
    ({"probe": 3}, "list of strings"),
    ({"nan": "explode"}, "'nan' must be one of"),
])
def test_bad_options_say_what_was_expected(bad, fragment):
    with pytest.raises(OptionsError, match=fragment):
        Options.from_mapping(bad, environ={})


def test_nan_action_implies_raise():
    assert Options.from_mapping({"probe": ["*"], "actions": ["nan"]}, environ={}).nan == "raise"
