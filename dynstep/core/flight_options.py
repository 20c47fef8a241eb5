"""The flight recorder's options: ``options={"flight": True | {...}}``, ``DYNSTEP_FLIGHT=DIR``,
``dynstep run --flight DIR``. Parsed into one frozen `FlightOptions` (the superstep `Options` holds it).

    parse_flight(True)                                                     # K=64, every node, ./dynstep-flight/
    parse_flight({"steps": 16, "on": ["nonfinite", "spike:loss"], "select": ["module:**"], "path": "out/"})
    parse_flight(None, environ={"DYNSTEP_FLIGHT": "out/"})                 # from the environment

Trigger rules (`on`): ``nonfinite`` (the first NaN/Inf in any probed value or gradient), ``nonfinite:value``
(values only: a run under AMP's GradScaler, whose gradients overflow on purpose), ``spike:NAME`` or
``spike:NAME:FACTOR`` (the scalar `dynstep.flight.watch(NAME, x)` is non-finite or above FACTOR (default 2)
times the median of its earlier values), ``exception`` (an exception leaving a compiled call or ending the
program), ``signal`` (SIGTERM, SIGINT). `dynstep.flight.dump()` always works. Environment variables fill in
what the options did not set: DYNSTEP_FLIGHT_STEPS, DYNSTEP_FLIGHT_ON, DYNSTEP_FLIGHT_SELECT,
DYNSTEP_FLIGHT_INPUTS (bytes: 512M).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import OptionsError
from .onoff import on_off

DEFAULT_PATH = "dynstep-flight"
DEFAULT_STEPS = 64
MAX_STEPS = 4096
DEFAULT_ON = ("nonfinite", "exception", "signal")
DEFAULT_INPUTS = 512 << 20
DEFAULT_SPIKE_FACTOR = 2.0
RULES = ("nonfinite", "nonfinite:value", "spike:NAME", "spike:NAME:FACTOR", "exception", "signal")
KEYS = ("steps", "on", "path", "select", "inputs")


@dataclasses.dataclass(frozen=True)
class SpikeRule:
    """``spike:NAME[:FACTOR]``: the watched scalar NAME is non-finite or jumps above FACTOR x its median."""

    name: str
    factor: float = DEFAULT_SPIKE_FACTOR


@dataclasses.dataclass(frozen=True)
class FlightOptions:
    steps: int = DEFAULT_STEPS            # K: the steps kept before the trigger
    on: tuple[str, ...] = DEFAULT_ON      # trigger rules
    path: str = DEFAULT_PATH              # where dumps go (one folder per dump)
    select: tuple[str, ...] = ("*",)      # selectors of the probed values (gradients follow)
    inputs: int = DEFAULT_INPUTS          # bytes of graph inputs kept for `dynstep flight replay` (0: none)

    @property
    def nonfinite(self) -> str | None:
        """"any" (values and gradients), "value" (values only) or None."""
        if "nonfinite" in self.on:
            return "any"
        return "value" if "nonfinite:value" in self.on else None

    @property
    def spikes(self) -> tuple[SpikeRule, ...]:
        return tuple(_spike(rule) for rule in self.on if rule.startswith("spike:"))

    @property
    def exceptions(self) -> bool:
        return "exception" in self.on

    @property
    def signals(self) -> bool:
        return "signal" in self.on


def parse_flight(given: Any, *, environ: Mapping[str, str] | None = None,
                 set_in_call: bool = False) -> FlightOptions | None:
    """The `flight` option (True, False/None, or a mapping) with DYNSTEP_FLIGHT* filling in the rest.

    `set_in_call`: the call named `flight` (then False means off whatever the environment says)."""
    env = os.environ if environ is None else environ
    if given is None or given is False:
        if set_in_call and given is False:
            return None
        path = _env_path(env)
        return None if path is None else _build({}, env, path)
    if given is True:
        return _build({}, env, _env_path(env) or DEFAULT_PATH)
    if isinstance(given, Mapping):
        unknown = sorted(set(given) - set(KEYS))
        if unknown:
            raise OptionsError(f"option 'flight': unknown key(s) {unknown}; expected some of {list(KEYS)}")
        path = given["path"] if "path" in given else (_env_path(env) or DEFAULT_PATH)
        return _build(given, env, path)
    raise OptionsError(f"option 'flight' must be True, False or a mapping like {{'steps': 64, 'on': ['nonfinite'], "
                       f"'path': 'dynstep-flight', 'select': ['*']}}, got {given!r}")


def _build(given: Mapping[str, Any], env: Mapping[str, str], path: Any) -> FlightOptions:
    steps = given.get("steps", env.get("DYNSTEP_FLIGHT_STEPS") or DEFAULT_STEPS)
    on = given.get("on", _env_list(env, "DYNSTEP_FLIGHT_ON") or DEFAULT_ON)
    select = given.get("select", _env_list(env, "DYNSTEP_FLIGHT_SELECT") or ("*",))
    inputs = given.get("inputs", env.get("DYNSTEP_FLIGHT_INPUTS") or DEFAULT_INPUTS)
    return FlightOptions(steps=_steps(steps), on=_rules(on), path=_path(path), select=_strings("select", select),
                         inputs=_bytes(inputs))


def _env_path(env: Mapping[str, str]) -> str | None:
    raw = env.get("DYNSTEP_FLIGHT", "").strip()
    switch = on_off(raw)
    if switch is not None:
        return DEFAULT_PATH if switch else None
    return raw


def _env_list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in env.get(name, "").split(",") if p.strip())


def _steps(value: Any) -> int:
    try:
        steps = int(value)
    except (TypeError, ValueError):
        steps = -1
    if isinstance(value, bool) or (isinstance(value, float) and value != steps) or not 1 <= steps <= MAX_STEPS:
        raise OptionsError(f"option 'flight': 'steps' (or DYNSTEP_FLIGHT_STEPS) must be an integer from 1 to "
                           f"{MAX_STEPS}, the steps kept before a trigger; got {value!r}")
    return steps


def _strings(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Sequence) and value and all(isinstance(v, str) and v.strip() for v in value):
        return tuple(v.strip() for v in value)
    raise OptionsError(f"option 'flight': {name!r} must be a non-empty list of strings, got {value!r}")


def _rules(value: Any) -> tuple[str, ...]:
    rules = tuple(dict.fromkeys(_strings("on", value)))
    for rule in rules:
        if rule not in ("nonfinite", "nonfinite:value", "exception", "signal") and not rule.startswith("spike:"):
            raise OptionsError(f"option 'flight': unknown trigger rule {rule!r} in 'on'; expected some of "
                               f"{list(RULES)}")
        if rule.startswith("spike:"):
            _spike(rule)
    return rules


def _spike(rule: str) -> SpikeRule:
    parts = rule.split(":")
    name = parts[1].strip() if len(parts) > 1 else ""
    factor = DEFAULT_SPIKE_FACTOR
    if len(parts) == 3:
        try:
            factor = float(parts[2])
        except ValueError:
            factor = math.nan
    if not name or len(parts) > 3 or not (factor > 1 and math.isfinite(factor)):
        raise OptionsError(f"option 'flight': trigger rule {rule!r}: expected spike:NAME or spike:NAME:FACTOR with "
                           "FACTOR > 1 (e.g. spike:loss or spike:loss:3), NAME as given to dynstep.flight.watch")
    return SpikeRule(name, factor)


def _path(value: Any) -> str:
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not text or not str(text).strip():
        raise OptionsError(f"option 'flight': 'path' (or DYNSTEP_FLIGHT=DIR) must be a directory path, got {value!r}")
    return str(text)


def _bytes(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        text = value.strip().lower().removesuffix("b")
        scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
        digits = text[:-1] if scale > 1 else text
        if digits.isdigit():
            return int(digits) * scale
    raise OptionsError(f"option 'flight': 'inputs' (or DYNSTEP_FLIGHT_INPUTS) must be a number of bytes such as "
                       f"536870912 or '512M' (0: keep no graph inputs), got {value!r}")
