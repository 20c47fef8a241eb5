"""The superstep backend's options: one frozen dataclass, built from a mapping and `DYNSTEP_*`.

    opts = Options.from_mapping({"probe": ["module:blocks.*"], "inner": "aot_eager"})

Environment variables fill in what the call did not set, so a script can be debugged without
editing it (lists from the environment are added to the call's lists):

    DYNSTEP_INNER=aot_eager  DYNSTEP_PROBE="module:blocks.*,op:layer_norm"  DYNSTEP_PAUSE=...
    DYNSTEP_ACTIONS=summary,record  DYNSTEP_RECORD=32  DYNSTEP_GRADS=1  DYNSTEP_NAN=raise
    DYNSTEP_DIFF=1  DYNSTEP_MODE=max-autotune  DYNSTEP_DISABLE=1 (superstep becomes transparent)
    DYNSTEP_STEP=1 (step points everywhere, stop at the first node)  DYNSTEP_FRONTEND=repl|script|pdb
    DYNSTEP_COMMANDS="p value.mean(); s; c"  (scripted commands; when they run out: continue)
    DYNSTEP_RANKS=0|1,3|all  (a distributed job: which ranks pause; the others wait; docs/distributed.md)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import OptionsError

ACTIONS = ("summary", "record", "print", "nan")
NAN_MODES = ("raise", "stop", "warn")
FRONTENDS = ("repl", "script", "pdb")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclasses.dataclass(frozen=True)
class Options:
    inner: str | Callable[..., Any] = "inductor"
    probe: tuple[str, ...] = ()
    pause: tuple[str, ...] = ()
    actions: tuple[str, ...] = ("summary",)
    record: int = 16
    grads: bool = False
    diff: bool = False
    nan: str | None = None
    mode: str | None = None
    frontend: str | None = None
    commands: str | None = None
    step: bool = False
    ranks: str | tuple[int, ...] | None = None   # "all", rank numbers, or None (rank 0)

    @property
    def transparent(self) -> bool:
        """True when superstep has nothing to add and hands the graph over untouched."""
        return not (self.probe or self.pause or self.diff or self.nan or self.step)

    @property
    def inner_name(self) -> str:
        inner = self.inner
        return inner if isinstance(inner, str) else getattr(inner, "__name__", repr(inner))

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None = None, *, mode: str | None = None,
                     environ: Mapping[str, str] | None = None) -> "Options":
        given = dict(options or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise OptionsError(
                f"unknown superstep option(s) {unknown}; expected some of {sorted(known)}")
        env = os.environ if environ is None else environ
        inner = given.get("inner", env.get("DYNSTEP_INNER") or "inductor")
        if _env_flag(env, "DYNSTEP_DISABLE"):
            return cls(inner=inner, mode=given.get("mode", mode))
        values: dict[str, Any] = {"inner": _inner(inner)}
        for name in ("probe", "pause"):
            values[name] = _str_list(name, given.get(name, ())) + _env_list(env, name)
        values["actions"] = _actions(given.get("actions", None), _env_list(env, "actions"))
        values["record"] = _int("record", given.get("record", env.get("DYNSTEP_RECORD", 16)))
        for flag in ("grads", "diff", "step"):
            values[flag] = _bool(flag, given.get(flag, _env_flag(env, f"DYNSTEP_{flag.upper()}")))
        values["nan"] = _nan(given.get("nan", env.get("DYNSTEP_NAN") or None))
        values["mode"] = given.get("mode", mode or env.get("DYNSTEP_MODE") or None)
        values.update(_front(given.get("frontend", env.get("DYNSTEP_FRONTEND") or None),
                             given.get("commands", env.get("DYNSTEP_COMMANDS") or None)))
        values["ranks"] = parse_ranks(given.get("ranks", env.get("DYNSTEP_RANKS") or None))
        opts = cls(**values)
        if "nan" in opts.actions and opts.nan is None:
            opts = dataclasses.replace(opts, nan="raise")
        return opts


def _inner(inner: Any) -> Any:
    if not (isinstance(inner, str) or callable(inner)):
        raise OptionsError(f"option 'inner' must be a backend name or a callable, got {type(inner).__name__}")
    if inner == "superstep":
        raise OptionsError("option 'inner' (or DYNSTEP_INNER) is 'superstep': superstep would compile each graph "
                           "with itself, forever; choose the compiler that runs the graph: eager, aot_eager, "
                           "inductor or another backend name")
    return inner


def _actions(given: Any, from_env: tuple[str, ...]) -> tuple[str, ...]:
    actions = (_str_list("actions", given) if given is not None else ()) + from_env
    actions = tuple(dict.fromkeys(actions or ("summary",)))
    bad = [a for a in actions if a not in ACTIONS]
    if bad:
        raise OptionsError(f"unknown action(s) {bad}; expected some of {list(ACTIONS)}")
    return actions


def _nan(nan: Any) -> str | None:
    if nan is True:
        return "raise"
    if nan is False:
        return None
    if nan is not None and nan not in NAN_MODES:
        raise OptionsError(f"option 'nan' must be one of {list(NAN_MODES)} or None, got {nan!r}")
    return nan


def parse_ranks(value: Any) -> str | tuple[int, ...] | None:
    """The `ranks` option: "all", "0", "1,3", 2, [0, 1] -> "all" or sorted rank numbers (None: not set).
    Whether the ranks exist is checked at run time, against the job (dynstep.jobs.ranks)."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().lower() == "all":
        return "all"
    parts = value.split(",") if isinstance(value, str) else ([value] if isinstance(value, int) else value)
    try:
        ranks = [int(p.strip()) if isinstance(p, str) else p for p in parts]
    except ValueError:
        ranks = []
    if not ranks or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
        raise OptionsError(f"option 'ranks' (or DYNSTEP_RANKS, --ranks) must be 'all' or rank numbers such as "
                           f"0 or 1,3, got {value!r}")
    return tuple(sorted(set(ranks)))


def _front(frontend: Any, commands: Any) -> dict[str, Any]:
    if frontend is not None and frontend not in FRONTENDS:
        raise OptionsError(f"option 'frontend' must be one of {list(FRONTENDS)}, got {frontend!r}")
    if commands is not None and not isinstance(commands, str):
        raise OptionsError(f"option 'commands' must be a string like \"p value.mean(); s; c\", "
                           f"got {commands!r}")
    return {"frontend": frontend, "commands": commands}


SWITCHES = ("DYNSTEP_NATIVE", "DYNSTEP_FAST_PROBE", "DYNSTEP_PROBES", "DYNSTEP_BREAKPOINTS", "DYNSTEP_FUSED_STATS",
            "DYNSTEP_KERNEL_COUNTS")


def switched_off(name: str) -> bool:
    """A DYNSTEP_* on/off switch read from the environment: off for 0/false/no/off, on when unset or empty."""
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("0", "false", "no", "off"):
        return True
    if raw in ("", "1", "true", "yes", "on"):
        return False
    raise OptionsError(f"environment variable {name}={os.environ[name]!r}: expected 1/0 (or true/false, "
                       "yes/no, on/off)")


def switched_on(name: str) -> bool:
    """A DYNSTEP_* switch that is off unless set to 1/true/yes/on."""
    return bool(os.environ.get(name, "").strip()) and not switched_off(name)


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every DYNSTEP_* variable that is not a superstep option, checked at once (`dynstep run` does it
    before the script starts; each is also checked where it is read)."""
    env = os.environ if environ is None else environ
    for name in SWITCHES:
        _env_flag(env, name)
    if env.get("DYNSTEP_RECORD_MEMORY", "").strip():
        byte_count("DYNSTEP_RECORD_MEMORY", env["DYNSTEP_RECORD_MEMORY"])


def _str_list(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise OptionsError(f"option {name!r} must be a string or a list of strings, got {value!r}")


def _env_list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = env.get(f"DYNSTEP_{name.upper()}", "")
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _env_flag(env: Mapping[str, str], key: str) -> bool:
    raw = env.get(key, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise OptionsError(f"environment variable {key}={raw!r}: expected one of 1/0/true/false")


MAX_RECORD = 1 << 24   # ring slots per probe; more is a typo, not a debugging session


def _int(name: str, value: Any) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise OptionsError(f"option {name!r} must be a positive integer, got {value!r}") from None
    if out < 1 or isinstance(value, bool) or (isinstance(value, float) and value != out):
        raise OptionsError(f"option {name!r} must be a positive integer, got {value!r}")
    if out > MAX_RECORD:
        raise OptionsError(f"option {name!r}={out} is more than {MAX_RECORD} ring slots per probe; keep fewer "
                           "(the ring holds the last N hits; older ones are counted in Session.dropped)")
    return out


def byte_count(name: str, raw: str) -> int:
    """A size from the environment: 1073741824, 512M, 2G, 64k."""
    text = raw.strip().lower().removesuffix("b")
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit():
        raise OptionsError(f"environment variable {name}={raw!r}: expected a number of bytes, e.g. 1073741824, "
                           "512M or 2G")
    return int(digits) * scale


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise OptionsError(f"option {name!r} must be True or False, got {value!r}")
