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
    DYNSTEP_FLIGHT=DIR  (the flight recorder, dumps under DIR; DYNSTEP_FLIGHT_STEPS/_ON/_SELECT/_INPUTS: docs/flight.md)

Every DYNSTEP_* variable, superstep option or not, has one row in `ENV_VARS` (its kind, the values
it takes, what it does); `check_environment()` checks them all at start-up with the variable's name in
the message (`dynstep run` before the script, superstep at each compile) and `env_value(NAME)` reads
one typed. Adding a variable: one `EnvVar` row there and the same row in README.md's table of
variables (tests/core/test_env_table.py holds the two together and finds a DYNSTEP_* name used in
dynstep/ or backends/ without a row).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import OptionsError
from .flight_options import DEFAULT_STEPS, MAX_STEPS, FlightOptions, parse_flight
from .onoff import on_off

ACTIONS = ("summary", "record", "print", "nan")
NAN_MODES = ("raise", "stop", "warn")
FRONTENDS = ("repl", "script", "pdb")
MAX_RECORD = 1 << 24   # ring slots per probe; more is a typo, not a debugging session


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
    flight: FlightOptions | None = None          # the flight recorder (core/flight_options.py)

    @property
    def transparent(self) -> bool:
        """True when superstep has nothing to add and hands the graph over untouched."""
        return not (self.probe or self.pause or self.diff or self.nan or self.step or self.flight)

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
        if env_value("DYNSTEP_DISABLE", env):
            return cls(inner=inner, mode=given.get("mode", mode))
        values: dict[str, Any] = {"inner": _inner(inner)}
        for name in ("probe", "pause"):
            values[name] = _str_list(name, given.get(name, ())) + _env_list(env, name)
        values["actions"] = _actions(given.get("actions", None), _env_list(env, "actions"))
        values["record"] = _int("record", given.get("record", env.get("DYNSTEP_RECORD", 16)))
        for flag in ("grads", "diff", "step"):
            values[flag] = _bool(flag, given.get(flag, env_value(f"DYNSTEP_{flag.upper()}", env)))
        values["nan"] = _nan(given.get("nan", env.get("DYNSTEP_NAN") or None))
        values["mode"] = given.get("mode", mode or env.get("DYNSTEP_MODE") or None)
        values.update(_front(given.get("frontend", env.get("DYNSTEP_FRONTEND") or None),
                             given.get("commands", env.get("DYNSTEP_COMMANDS") or None)))
        values["ranks"] = parse_ranks(given.get("ranks", env.get("DYNSTEP_RANKS") or None))
        values["flight"] = parse_flight(given.get("flight"), environ=env, set_in_call="flight" in given)
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


@dataclasses.dataclass(frozen=True)
class EnvVar:
    """One DYNSTEP_* variable. kind: flag (off unless set), switch (on unless set to 0), int, bytes,
    seconds, choice, words (a comma list of choices), selectors, ranks, address, text, path."""

    name: str
    kind: str
    values: str                  # the values it takes, as README.md's table says them
    what: str
    choices: tuple[str, ...] = ()
    low: float = 0
    high: float = math.inf


MAX_BYTES = (1 << 63) - 1      # what the native ring's memory cap (int64) holds
ENV_VARS = (
    EnvVar("DYNSTEP_INNER", "text", "a backend name (not superstep)", "superstep's inner compiler (`inner`)"),
    EnvVar("DYNSTEP_PROBE", "selectors", "selectors, comma-separated", "added to `probe`"),
    EnvVar("DYNSTEP_PAUSE", "selectors", "selectors, comma-separated", "added to `pause`"),
    EnvVar("DYNSTEP_ACTIONS", "words", "summary, record, print, nan (comma-separated)", "added to `actions`",
           ACTIONS),
    EnvVar("DYNSTEP_RECORD", "int", f"1 to {MAX_RECORD}", "ring capacity per probe (`record`)", low=1,
           high=MAX_RECORD),
    EnvVar("DYNSTEP_GRADS", "flag", "1/0", "probe gradients too (`grads`)"),
    EnvVar("DYNSTEP_DIFF", "flag", "1/0", "diff every compiled graph against eager (`diff`)"),
    EnvVar("DYNSTEP_STEP", "flag", "1/0", "stop points everywhere, stop at the first node (`step`)"),
    EnvVar("DYNSTEP_DISABLE", "flag", "1/0", "superstep becomes transparent"),
    EnvVar("DYNSTEP_NAN", "choice", "raise, stop, warn", "stop or raise at the first NaN/Inf (`nan`)", NAN_MODES),
    EnvVar("DYNSTEP_MODE", "text", "a torch.compile mode", "`mode` for the inner compiler"),
    EnvVar("DYNSTEP_FRONTEND", "choice", "repl, script, pdb", "who answers stops (`frontend`)", FRONTENDS),
    EnvVar("DYNSTEP_COMMANDS", "text", "commands separated by ;", "scripted commands at stops (`commands`)"),
    EnvVar("DYNSTEP_RANKS", "ranks", "all, or rank numbers (0 or 1,3)", "which ranks of a job pause (`ranks`)"),
    EnvVar("DYNSTEP_PROBES", "switch", "1/0 (default 1)", "every probe on or off from start-up"),
    EnvVar("DYNSTEP_BREAKPOINTS", "switch", "1/0 (default 1)", "`dynstep.breakpoint()` on or off"),
    EnvVar("DYNSTEP_NATIVE", "switch", "1/0 (default 1)", "build and use the native probe kernel"),
    EnvVar("DYNSTEP_FAST_PROBE", "switch", "1/0 (default 1)", "Inductor's code calls the native probe directly"),
    EnvVar("DYNSTEP_FUSED_STATS", "switch", "1/0 (default 1)",
           "under Inductor, summary probes become reductions inside the generated kernels"),
    EnvVar("DYNSTEP_KERNEL_COUNTS", "flag", "1/0", "count the kernels each probed graph gets with and without probes "
           "(a second compile per graph)"),
    EnvVar("DYNSTEP_NATIVE_STACK", "switch", "1/0 (default 1)", "the bytecode stepper's native value-stack reader"),
    EnvVar("DYNSTEP_BYTECODE_MECHANISM", "choice", "auto, callback, hook", "what the bytecode stepper runs on",
           ("auto", "callback", "hook")),
    EnvVar("DYNSTEP_RECORD_MEMORY", "bytes", "bytes up to 2^63-1 (1073741824, 512M, 2G)",
           "cap on the memory of all record rings (default 1G)", high=MAX_BYTES),
    EnvVar("DYNSTEP_CACHE_DIR", "path", "a directory", "where native builds are cached (default ~/.cache/dynstep)"),
    EnvVar("DYNSTEP_BUILD_WAIT", "seconds", "seconds, 0 to 86400 (default 300)",
           "how long to wait for another process's native build", high=86400),
    EnvVar("DYNSTEP_FLIGHT", "text", "1, 0, or a directory", "the flight recorder, dumps under DIR (`flight`)"),
    EnvVar("DYNSTEP_FLIGHT_STEPS", "int", f"1 to {MAX_STEPS} (default {DEFAULT_STEPS})",
           "steps a flight dump keeps before its trigger", low=1, high=MAX_STEPS),
    EnvVar("DYNSTEP_FLIGHT_ON", "text", "nonfinite, exception, signal, spike:NAME[:FACTOR] (comma-separated)",
           "what makes the flight recorder dump"),
    EnvVar("DYNSTEP_FLIGHT_SELECT", "selectors", "selectors, comma-separated (default *)",
           "which values the flight recorder watches"),
    EnvVar("DYNSTEP_FLIGHT_INPUTS", "bytes", "bytes (512M default; 0: none)", "graph inputs kept for a flight replay"),
    EnvVar("DYNSTEP_DAP", "address", "PORT or HOST:PORT", "serve the Debug Adapter Protocol from the first compile"),
    EnvVar("DYNSTEP_DAP_WAIT", "flag", "1/0", "with DYNSTEP_DAP: wait until a client has attached"),
    EnvVar("DYNSTEP_DAP_TOKEN", "text", "a token", "the token a client's attach must give"),
    EnvVar("DYNSTEP_DAP_JOB", "address", "HOST:PORT (set by dynstep run)", "a job's debug adapter, named to a rank"),
    EnvVar("DYNSTEP_DEAD_AFTER", "seconds", "seconds, 2 to 86400 (default 30)",
           "a rank silent that long while others wait is dead", low=2, high=86400),
    EnvVar("DYNSTEP_LOCKSTEP_WAIT", "seconds", "seconds, 2 to 86400 (default 600)",
           "live ranks that long absent from a stop point, nobody paused: go on without the lockstep",
           low=2, high=86400),
    EnvVar("DYNSTEP_PYTHON_GDB", "path", "a file", "the python3.X-gdb.py `dynstep gdb` loads"),
    EnvVar("DYNSTEP_GDB_STATUS", "path", "a file (set by dynstep gdb)", "where the program's exit code goes"),
    EnvVar("DYNSTEP_GDB_AT_HIT", "text", "gdb commands separated by ;", "run at each native breakpoint hit"),
)
ENV = {v.name: v for v in ENV_VARS}
SWITCHES = tuple(v.name for v in ENV_VARS if v.kind == "switch")


def env_value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """A DYNSTEP_* variable, checked against its row and typed; None when unset or empty (a flag:
    False, a switch: True). OptionsError naming the variable otherwise."""
    env = os.environ if environ is None else environ
    var, raw = ENV[name], env.get(name, "")
    if not raw.strip():
        return {"flag": False, "switch": True}.get(var.kind)
    return _PARSE[var.kind](var, raw)


def _bad(var: EnvVar, raw: str, more: str = "") -> OptionsError:
    return OptionsError(f"environment variable {var.name}={raw!r}: expected {var.values}{more}")


def _on_off(var: EnvVar, raw: str) -> bool:
    value = on_off(raw)
    if value is None:
        raise _bad(var, raw, " (or true/false, yes/no, on/off)")
    return value


def _number(var: EnvVar, raw: str) -> float:
    text = raw.strip()
    try:
        value = int(text) if var.kind == "int" else float(text)
    except ValueError:
        raise _bad(var, raw) from None
    if not (math.isfinite(value) and var.low <= value <= var.high):
        raise _bad(var, raw)
    return value


def _bytes(var: EnvVar, raw: str) -> int:
    value = byte_count(var.name, raw)
    if value > var.high:
        raise OptionsError(f"environment variable {var.name}={raw!r}: {value} bytes is over the limit of 2^63-1; "
                           f"expected {var.values}")
    return value


def _choice(var: EnvVar, raw: str) -> Any:
    words = [w.strip() for w in raw.split(",") if w.strip()] if var.kind == "words" else [raw.strip()]
    bad = [w for w in words if w not in var.choices]
    if bad:
        raise _bad(var, raw, f" (not {', '.join(map(repr, bad))})")
    return tuple(words) if var.kind == "words" else words[0]


def _ranks(var: EnvVar, raw: str) -> Any:
    try:
        return parse_ranks(raw)
    except OptionsError:
        raise _bad(var, raw) from None


def _address(var: EnvVar, raw: str) -> str:
    host, sep, port = raw.strip().rpartition(":")
    if not port.isdigit() or int(port) > 65535 or (var.values.startswith("HOST") and not sep):
        raise _bad(var, raw, ", the port from 0 to 65535")
    return raw.strip()


_PARSE: dict[str, Callable[[EnvVar, str], Any]] = {
    "flag": _on_off, "switch": _on_off, "int": _number, "seconds": _number, "bytes": _bytes, "choice": _choice,
    "words": _choice, "ranks": _ranks, "address": _address,
    "selectors": lambda var, raw: tuple(p.strip() for p in raw.split(",") if p.strip()),
    "text": lambda var, raw: raw, "path": lambda var, raw: raw.strip(),
}


def switched_off(name: str) -> bool:
    """A DYNSTEP_* on/off switch read from the environment: off for 0/false/no/off, on when unset or empty."""
    return not env_value(name)


def switched_on(name: str) -> bool:
    """A DYNSTEP_* flag: off unless set to 1/true/yes/on."""
    return bool(env_value(name))


def check_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every DYNSTEP_* variable checked against its row at once (`dynstep run` before the script starts,
    superstep at each compile): the first bad one is an OptionsError naming it. Returns a note for each
    unknown DYNSTEP_* name that looks like a misspelt known one (the caller says it; it is ignored)."""
    env = os.environ if environ is None else environ
    notes = []
    for name in sorted(k for k in env if k.startswith("DYNSTEP_")):
        if name in ENV:
            env_value(name, env)
            continue
        close = difflib.get_close_matches(name, list(ENV), n=1, cutoff=0.85)
        if close:
            notes.append(f"unknown environment variable {name} (did you mean {close[0]}?); ignored")
    parse_flight(True, environ=env)   # the flight variables together (checked as if the flight were on)
    return notes


def _str_list(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise OptionsError(f"option {name!r} must be a string or a list of strings, got {value!r}")


def _env_list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = env.get(f"DYNSTEP_{name.upper()}", "")
    return tuple(part.strip() for part in raw.split(",") if part.strip())


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
