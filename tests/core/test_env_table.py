"""The one table of DYNSTEP_* variables (dynstep/core/options.py: ENV_VARS) against the README's table and
against the code: every DYNSTEP_* name in dynstep/ and backends/ has a row, and README and code say the
same values. Adding a variable is a row in each; the failure message prints the row to paste."""

from __future__ import annotations

import pathlib
import re

import pytest

from dynstep.core.errors import OptionsError
from dynstep.core.options import ENV, ENV_VARS, _PARSE, check_environment, env_value

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = re.compile(r"(?<![A-Za-z0-9_])DYNSTEP_[A-Z][A-Z0-9_]*")
NOT_VARIABLES = {"DYNSTEP_WITH_CUDA"}     # a C preprocessor macro of the native build, not an environment variable


def readme_rows() -> list[tuple[str, str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(m.group(1), m.group(2).strip(), m.group(3).strip())
            for m in re.finditer(r"^\| `(DYNSTEP_[A-Z0-9_]+)` \|([^|]*)\|([^|]*)\|$", text, re.M)]


def test_the_readme_table_is_the_code_table():
    rows = readme_rows()
    expected = [(v.name, v.values, v.what) for v in ENV_VARS]
    missing = [f"| `{n}` | {values} | {what} |" for n, values, what in expected if (n, values, what) not in rows]
    assert not missing, "README.md's table of DYNSTEP_* variables lacks (or words differently):\n" + "\n".join(missing)
    assert rows == expected, "README.md's table has rows the code does not, or another order"


def test_every_dynstep_variable_the_code_reads_has_a_row():
    used: dict[str, str] = {}
    for folder in ("dynstep", "backends"):
        for file in (ROOT / folder).rglob("*.py"):
            for name in NAME.findall(file.read_text(encoding="utf-8")):
                used.setdefault(name, str(file.relative_to(ROOT)))
    unlisted = {n: f for n, f in used.items() if n not in ENV and n not in NOT_VARIABLES}
    assert not unlisted, ("add an EnvVar row to ENV_VARS in dynstep/core/options.py (and the README table) for: "
                          + ", ".join(f"{n} (read in {f})" for n, f in sorted(unlisted.items())))


def test_every_row_has_a_known_kind_and_values():
    for var in ENV_VARS:
        assert var.kind in _PARSE and var.values and var.what and var.name.startswith("DYNSTEP_")
        assert env_value(var.name, {}) == {"flag": False, "switch": True}.get(var.kind)


GOOD = [("DYNSTEP_RECORD_MEMORY", "512M", 512 << 20), ("DYNSTEP_RECORD_MEMORY", "0", 0),
        ("DYNSTEP_DEAD_AFTER", "2.5", 2.5), ("DYNSTEP_DAP", "0.0.0.0:5679", "0.0.0.0:5679"), ("DYNSTEP_DAP", "0", "0"),
        ("DYNSTEP_RANKS", "1,3", (1, 3)), ("DYNSTEP_ACTIONS", "summary, record", ("summary", "record")),
        ("DYNSTEP_NATIVE", "Off", False), ("DYNSTEP_GRADS", " yes ", True), ("DYNSTEP_RECORD", "16", 16),
        ("DYNSTEP_PROBE", "op:relu, module:a.*", ("op:relu", "module:a.*"))]


@pytest.mark.parametrize("name,raw,value", GOOD, ids=[f"{n}={r}" for n, r, _ in GOOD])
def test_good_values_read_typed(name, raw, value):
    assert env_value(name, {name: raw}) == value
    check_environment({name: raw})


def test_a_misspelt_variable_is_pointed_out_and_others_left_alone():
    notes = check_environment({"DYNSTEP_PROEB": "op:relu", "DYNSTEP_TEST_OUT": "x"})
    assert notes == ["unknown environment variable DYNSTEP_PROEB (did you mean DYNSTEP_PROBE?); ignored"]


def test_the_first_bad_variable_is_named():
    with pytest.raises(OptionsError, match="DYNSTEP_DEAD_AFTER='-5'"):
        check_environment({"DYNSTEP_NATIVE": "1", "DYNSTEP_DEAD_AFTER": "-5"})
