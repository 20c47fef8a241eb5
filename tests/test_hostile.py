"""A table of bad inputs a new or a hostile user gives dynstep (issue 14), each with the error it must
get — what was wrong, what was expected — and the user's program and files left intact.

Kinds: superstep options (through torch.compile and dynstep.superstep), selectors, DYNSTEP_*
variables, session arguments, TensorProbe arguments, commands at a stop, recordings, CLI calls, and
(issue 26) every DYNSTEP_* variable's range, CheckAction's arguments, recordings with links, FIFOs and
a missing index, and DAP messages a careless or hostile client sends. Tests named test_26_NN pin item
NN of issue 26; the DAP server's own are in tests/dap/test_reliability.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import dynstep
from dynstep.core.errors import OptionsError, SelectorError, StorageError
from dynstep.core.events import CommandFailed, Info, use_sink

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model_fn(x):
    y = torch.relu(x) * 2
    return torch.tanh(y) + 1


# -- superstep options: (options, error type, words the message must have) --------------------------
BAD_OPTIONS = [
    ({"probe": ["zzz:"]}, SelectorError, "malformed selector 'zzz:'"),
    ({"probe": ["op"]}, SelectorError, "malformed selector 'op'"),
    ({"probe": ["op:"]}, SelectorError, "malformed selector 'op:'"),
    ({"probe": ["line:model.py"]}, SelectorError, "expected line:<file>:<line>"),
    ({"probe": ["line:model.py:abc"]}, SelectorError, "expected line:<file>:<line>"),
    ({"probe": ["line::12"]}, SelectorError, "expected line:<file>:<line>"),
    ({"probe": ["modules:blocks"]}, SelectorError, "malformed selector"),
    ({"probe": [" "]}, SelectorError, "malformed selector"),
    ({"pause": ["nodes:x"]}, SelectorError, "option 'pause'"),
    ({"probe": 3}, OptionsError, "must be a string or a list of strings"),
    ({"probe": [3]}, OptionsError, "must be a string or a list of strings"),
    ({"probe": None}, OptionsError, "must be a string or a list of strings"),
    ({"pause": {"a": 1}}, OptionsError, "must be a string or a list of strings"),
    ({"actions": ["summery"]}, OptionsError, "unknown action(s) ['summery']"),
    ({"actions": "recrod"}, OptionsError, "unknown action(s) ['recrod']"),
    ({"actions": [1]}, OptionsError, "must be a string or a list of strings"),
    ({"record": 0}, OptionsError, "'record' must be a positive integer"),
    ({"record": -5}, OptionsError, "'record' must be a positive integer"),
    ({"record": "lots"}, OptionsError, "'record' must be a positive integer, got 'lots'"),
    ({"record": 2.5}, OptionsError, "'record' must be a positive integer"),
    ({"record": True}, OptionsError, "'record' must be a positive integer"),
    ({"record": 10 ** 12}, OptionsError, "ring slots per probe"),
    ({"grads": "yes"}, OptionsError, "'grads' must be True or False"),
    ({"diff": 1}, OptionsError, "'diff' must be True or False"),
    ({"step": "no"}, OptionsError, "'step' must be True or False"),
    ({"nan": "explode"}, OptionsError, "'nan' must be one of ['raise', 'stop', 'warn']"),
    ({"nan": 1}, OptionsError, "'nan' must be one of"),
    ({"frontend": "gdb"}, OptionsError, "'frontend' must be one of ['repl', 'script', 'pdb']"),
    ({"commands": ["p value"]}, OptionsError, "'commands' must be a string"),
    ({"inner": "superstep", "probe": ["*"]}, OptionsError, "superstep would compile each graph with itself"),
    ({"inner": 42}, OptionsError, "'inner' must be a backend name or a callable"),
    ({"probes": ["op:relu"]}, OptionsError, "unknown superstep option(s) ['probes']"),
    ({"selectors": ["op:relu"], "actoins": []}, OptionsError, "unknown superstep option(s) ['actoins', 'selectors']"),
]


@pytest.mark.parametrize("options,kind,words", BAD_OPTIONS, ids=[str(o) for o, _, _ in BAD_OPTIONS])
def test_bad_options_through_torch_compile(options, kind, words):
    x = torch.randn(3)
    with pytest.raises(kind) as info:
        torch.compile(model_fn, backend="superstep", options=options)(x)
    assert words in str(info.value) and isinstance(info.value, ValueError)
    assert "TORCHDYNAMO_VERBOSE" not in str(info.value)
    assert torch.equal(model_fn(x), torch.tanh(torch.relu(x) * 2) + 1)   # the program still runs


@pytest.mark.parametrize("options,kind,words", BAD_OPTIONS, ids=[str(o) for o, _, _ in BAD_OPTIONS])
def test_bad_options_when_the_backend_is_made(options, kind, words):
    with pytest.raises(kind, match=None) as info:
        dynstep.superstep(**options)
    assert words in str(info.value)


# -- environment variables ----------------------------------------------------------------------------
BAD_ENV = [
    ("DYNSTEP_PROBE", "zzz:", SelectorError, "malformed selector 'zzz:'"),
    ("DYNSTEP_PAUSE", "op", SelectorError, "option 'pause'"),
    ("DYNSTEP_ACTIONS", "summary,bogus", OptionsError, "unknown action(s) ['bogus']"),
    ("DYNSTEP_RECORD", "many", OptionsError, "'record' must be a positive integer, got 'many'"),
    ("DYNSTEP_RECORD", "0", OptionsError, "'record' must be a positive integer"),
    ("DYNSTEP_GRADS", "maybe", OptionsError, "DYNSTEP_GRADS='maybe'"),
    ("DYNSTEP_DIFF", "2", OptionsError, "DYNSTEP_DIFF='2'"),
    ("DYNSTEP_STEP", "si", OptionsError, "DYNSTEP_STEP='si'"),
    ("DYNSTEP_DISABLE", "please", OptionsError, "DYNSTEP_DISABLE='please'"),
    ("DYNSTEP_NAN", "boom", OptionsError, "'nan' must be one of"),
    ("DYNSTEP_FRONTEND", "vim", OptionsError, "'frontend' must be one of"),
    ("DYNSTEP_INNER", "superstep", OptionsError, "superstep would compile each graph with itself"),
]


@pytest.mark.parametrize("name,value,kind,words", BAD_ENV, ids=[f"{n}={v}" for n, v, _, _ in BAD_ENV])
def test_bad_environment_options(name, value, kind, words):
    from dynstep.backends.superstep import checked
    from dynstep.core.options import Options

    with pytest.raises(kind) as info:
        checked(Options.from_mapping({}, environ={name: value}))
    assert words in str(info.value)


BAD_SWITCHES = [("DYNSTEP_RECORD_MEMORY", "lots", "expected a number of bytes"),
                ("DYNSTEP_RECORD_MEMORY", "-1", "expected a number of bytes"),
                ("DYNSTEP_RECORD_MEMORY", "12X", "expected a number of bytes"),
                ("DYNSTEP_RECORD_MEMORY", "99999999T", "over the limit of 2^63-1"),
                ("DYNSTEP_RECORD_MEMORY", "9223372036854775808", "over the limit of 2^63-1"),
                ("DYNSTEP_DEAD_AFTER", "garbage", "DYNSTEP_DEAD_AFTER='garbage': expected seconds, 2 to 86400"),
                ("DYNSTEP_DEAD_AFTER", "nan", "DYNSTEP_DEAD_AFTER='nan'"),
                ("DYNSTEP_DEAD_AFTER", "inf", "DYNSTEP_DEAD_AFTER='inf'"),
                ("DYNSTEP_DEAD_AFTER", "-5", "DYNSTEP_DEAD_AFTER='-5'"),
                ("DYNSTEP_DEAD_AFTER", "0.5", "DYNSTEP_DEAD_AFTER='0.5'"),
                ("DYNSTEP_DEAD_AFTER", "1e9", "DYNSTEP_DEAD_AFTER='1e9'"),
                ("DYNSTEP_RECORD", "0", "DYNSTEP_RECORD='0': expected 1 to 16777216"),
                ("DYNSTEP_RECORD", "many", "DYNSTEP_RECORD='many'"),
                ("DYNSTEP_RECORD", "99999999", "DYNSTEP_RECORD='99999999'"),
                ("DYNSTEP_RECORD", "2.5", "DYNSTEP_RECORD='2.5'"),
                ("DYNSTEP_DAP", "localhost:x", "DYNSTEP_DAP='localhost:x': expected PORT or HOST:PORT"),
                ("DYNSTEP_DAP", "70000", "the port from 0 to 65535"),
                ("DYNSTEP_DAP_JOB", "5679", "DYNSTEP_DAP_JOB='5679'"),
                ("DYNSTEP_DAP_WAIT", "please", "DYNSTEP_DAP_WAIT='please'"),
                ("DYNSTEP_RANKS", "two", "DYNSTEP_RANKS='two': expected all, or rank numbers"),
                ("DYNSTEP_RANKS", "-1", "DYNSTEP_RANKS='-1'"),
                ("DYNSTEP_ACTIONS", "summary,bogus", "(not 'bogus')"),
                ("DYNSTEP_NAN", "boom", "DYNSTEP_NAN='boom': expected raise, stop, warn"),
                ("DYNSTEP_FRONTEND", "vim", "DYNSTEP_FRONTEND='vim'"),
                ("DYNSTEP_BYTECODE_MECHANISM", "magic", "DYNSTEP_BYTECODE_MECHANISM='magic'"),
                ("DYNSTEP_NATIVE_STACK", "maybe", "DYNSTEP_NATIVE_STACK='maybe'"),
                ("DYNSTEP_GRADS", "maybe", "DYNSTEP_GRADS='maybe'"),
                ("DYNSTEP_DISABLE", "please", "DYNSTEP_DISABLE='please'"),
                ("DYNSTEP_NATIVE", "sometimes", "DYNSTEP_NATIVE='sometimes'"),
                ("DYNSTEP_PROBES", "maybe", "DYNSTEP_PROBES='maybe'"),
                ("DYNSTEP_FAST_PROBE", "fast", "DYNSTEP_FAST_PROBE='fast'"),
                ("DYNSTEP_BREAKPOINTS", "x", "DYNSTEP_BREAKPOINTS='x'")]


@pytest.mark.parametrize("name,value,words", BAD_SWITCHES, ids=[f"{n}={v}" for n, v, _ in BAD_SWITCHES])
def test_bad_switches(name, value, words):
    from dynstep.core.options import check_environment

    with pytest.raises(OptionsError, match=None) as info:
        check_environment({name: value})
    assert words in str(info.value)


def test_good_switch_spellings_pass():
    from dynstep.core.options import byte_count, check_environment

    check_environment({"DYNSTEP_NATIVE": "Off", "DYNSTEP_PROBES": " 1 ", "DYNSTEP_RECORD_MEMORY": "512M"})
    assert byte_count("X", "2G") == 2 << 30 and byte_count("X", "64kb") == 64 << 10 and byte_count("X", "7") == 7


# -- sessions and hand-placed probes --------------------------------------------------------------------
BAD_CALLS = [
    (lambda: dynstep.session(summaries=-1), OptionsError, "summaries=-1"),
    (lambda: dynstep.session(summaries="x"), OptionsError, "expected a positive integer"),
    (lambda: dynstep.session(all_threads="yes"), OptionsError, "all_threads='yes'"),
    (lambda: dynstep.session(path="/proc/version"), StorageError, "not a directory"),
    (lambda: dynstep.TensorProbe("p", [dynstep.RecordAction(capacity=0)]), ValueError, "expected >= 1"),
    (lambda: dynstep.TensorProbe("p", [dynstep.PrintAction(every=0)]), ValueError, "expected >= 1"),
    (lambda: dynstep.TensorProbe("p", ["record"]), TypeError, "is not an action"),
    (lambda: dynstep.TensorProbe("p", [dynstep.RecordAction(), dynstep.RecordAction()]), ValueError, "two RecordActions"),
    (lambda: dynstep.TensorProbe("p", when="sometimes"), ValueError, "expected 'capture' or 'always'"),
    (lambda: dynstep.TensorProbe("p", non_contiguous="fix"), ValueError, "expected 'error' or 'copy'"),
    (lambda: dynstep.TensorProbe("p", [dynstep.RecordAction()], when="always").watch_grad(torch.ones(2)),
     ValueError, "does not require grad"),
    (lambda: dynstep.load("/nonexistent/run.dynstep"), StorageError, "no manifest.json"),
    (lambda: dynstep.set_record_memory_cap(-1), ValueError, "must be >= 0"),
    (lambda: dynstep.CheckAction(expected="abc"), TypeError, "CheckAction(expected='abc'): expected a tensor, a number"),
    (lambda: dynstep.CheckAction(expected=b"\x00"), TypeError, "got a string"),
    (lambda: dynstep.CheckAction(expected=[[1, 2], [3]]), TypeError, "got list (expected sequence of length 2"),
    (lambda: dynstep.CheckAction(expected={"a": 1}), TypeError, "got dict"),
    (lambda: dynstep.CheckAction(expected=object()), TypeError, "got object"),
    (lambda: dynstep.CheckAction(expected=["1", "2"]), TypeError, "a (nested) list of numbers"),
    (lambda: dynstep.CheckAction(expected=torch.ones(2, dtype=torch.complex64)), TypeError, "a tensor of torch.complex64"),
    (lambda: dynstep.CheckAction(rtol=-1), ValueError, "CheckAction(rtol=-1): expected a finite number >= 0"),
    (lambda: dynstep.CheckAction(atol=float("nan")), ValueError, "CheckAction(atol=nan)"),
    (lambda: dynstep.CheckAction(rtol="1e-3"), ValueError, "CheckAction(rtol='1e-3')"),
    (lambda: dynstep.CheckAction(equal_nan="yes"), TypeError, "CheckAction(equal_nan='yes'): expected True or False"),
    (lambda: dynstep.TensorCompare(expected="abc"), TypeError, "expected a tensor, a number"),
]


@pytest.mark.parametrize("call,kind,words", BAD_CALLS, ids=[w for _, _, w in BAD_CALLS])
def test_bad_library_calls(call, kind, words):
    with pytest.raises(kind) as info:
        call()
    assert words in str(info.value)


# -- commands at a stop: each fails clearly, the program's result is unchanged ---------------------------
BAD_COMMANDS = [
    ("frobnicate", "unknown command 'frobnicate'"),
    ("p", "an expression is needed"),
    ("p undefined_name", "NameError"),
    ("p value.nosuch", "AttributeError"),
    ("p 1/0", "ZeroDivisionError"),
    ("p (", "SyntaxError"),
    ("p 'a;b'", None),                                  # one command: the ; is inside a string
    ("set value", "usage: set NAME = EXPR"),
    ("set = 3", "usage: set NAME = EXPR"),
    ("set 1x = 3", "usage: set NAME = EXPR"),
    ("set value = 'abc'", "cannot write a str into"),
    ("set value = torch.ones(7, 7)", "cannot write a value of shape [7, 7]"),
    ("set value = torch.ones(3, dtype=torch.complex64)", "cannot write"),
    ("set value = None", "cannot write a NoneType"),
    ("set value = [1, 'a', 3]", "cannot write list"),
    ("set x = x * 0", "input of the compiled graph"),
    ("b zzz:", "malformed selector"),
    ("cl nosuch", "no breakpoint or pause selector 'nosuch'"),
    ("g extra words", None),
    ("watch 1/0", None),
]


@pytest.fixture(scope="module")
def stop_transcript():
    def f(x):
        y = torch.relu(x) * 2
        return torch.tanh(y) + 1

    script = "; ".join(c for c, _ in BAD_COMMANDS) + "; c"
    cf = torch.compile(f, backend="superstep",
                       options={"inner": "eager", "pause": ["op:relu"], "commands": script})
    x = torch.randn(3)
    events: list[object] = []
    with use_sink(events.append):
        out = cf(x)
    return out, f(x), events


@pytest.mark.parametrize("command,words", BAD_COMMANDS, ids=[c for c, _ in BAD_COMMANDS])
def test_bad_commands_at_a_stop(stop_transcript, command, words):
    out, expected, events = stop_transcript
    assert torch.equal(out, expected)
    failed = {e.command: e.message for e in events if isinstance(e, CommandFailed)}
    if words is None:
        assert command not in failed
    else:
        assert words in failed[command], failed.get(command)


def test_the_script_did_not_detach(stop_transcript):
    _, _, events = stop_transcript
    assert not any(isinstance(e, Info) and "ran out" in e.message for e in events[:-1])


# -- recordings -----------------------------------------------------------------------------------------
BAD_LINES = [
    ({"kind": None}, "field 'kind'"), ({"probe": 1}, "field 'probe' must be str"), ({"node": None}, "field 'node'"),
    ({"target": []}, "field 'target'"), ({"module": 0}, "field 'module'"), ({"source": {}}, "field 'source'"),
    ({"graph": 1.5}, "field 'graph'"), ({"call": -1}, "field 'call' must be >= 0"), ({"call": 1.0}, "field 'call'"),
    ({"shape": [2.5]}, "field 'shape'"), ({"shape": [True]}, "field 'shape'"), ({"dtype": None}, "field 'dtype'"),
    ({"device": 0}, "field 'device'"), ({"site": "1"}, "field 'site'"), ({"seq": None}, "field 'seq'"),
    ({"source_text": 5}, "field 'source_text'"), ({"stats": []}, "field 'stats'"),
    ({"stats": {"nan": -3}}, "stats 'nan' must be a non-negative integer"),
    ({"stats": {"count": 1.5}}, "stats 'count' must be a non-negative integer"),
    ({"stats": {"mean": "high"}}, "a stats value must be a number"),
    ({"tensor": {"chunk": 3, "key": "t0"}}, "field 'tensor' must be null or"),
    ({"tensor": []}, "field 'tensor' must be null or"),
]


@pytest.mark.parametrize("change,words", BAD_LINES, ids=[str(c) for c, _ in BAD_LINES])
def test_bad_recording_lines(tmp_path, change, words):
    path = _save_three(tmp_path)
    lines = [json.loads(line) for line in (path / "records.jsonl").read_text().splitlines()]
    lines[1].update(change)
    (path / "records.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    with pytest.warns(RuntimeWarning, match="1 problem"):
        rec = dynstep.load(path)
    assert [r.call for r in rec.records()] == [0, 2] and words in rec.problems[0]
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before   # loading writes nothing
    assert {"chunk-0-000001.safetensors", "manifest.json", "records.jsonl"} <= set(before)


def _save_three(tmp_path):
    from dynstep.core.records import Snapshot, Stats
    from dynstep.recording.storage import save

    snaps = [Snapshot(kind="value", probe="op:x", node="n", target="t", module="m", source="a.py:1", graph="g",
                      call=i, shape=(2,), dtype="float32", device="cpu", stats=Stats(0.0, 1.0, 0.5, 0.1, 1.0, 0, 0, 2),
                      tensor=torch.full((2,), float(i)), site=1, seq=i) for i in range(3)]
    return save(snaps, tmp_path / "r.dynstep")


# -- the command line: one line, exit 2, nothing run ---------------------------------------------------------
BAD_CLI = [
    (["run", "--pause", "zzz:", "examples/pause_and_step.py"], {}, "malformed selector 'zzz:'"),
    (["run", "--probe", "op", "examples/pause_and_step.py"], {}, "malformed selector 'op'"),
    (["run", "no_such_script.py"], {}, "no such script 'no_such_script.py'"),
    (["run"], {}, "give a script"),
    (["run", "examples/pause_and_step.py"], {"DYNSTEP_RECORD_MEMORY": "lots"}, "DYNSTEP_RECORD_MEMORY='lots'"),
    (["run", "examples/pause_and_step.py"], {"DYNSTEP_PROBES": "maybe"}, "DYNSTEP_PROBES='maybe'"),
    (["diff", "examples/find_the_bug.py", "--backend", "no_such_module:backend"], {}, "cannot import 'backend'"),
    (["diff", "examples/find_the_bug.py", "--backend", "os:no_such_attr"], {}, "cannot import 'no_such_attr'"),
    (["run", "--inner", "superstep", "examples/pause_and_step.py"], {}, "superstep would compile"),
    (["diff", "no_such_script.py"], {}, "no such script"),
    (["run", "examples/pause_and_step.py"], {"DYNSTEP_RECORD_MEMORY": "99999999T"}, "DYNSTEP_RECORD_MEMORY='99999999T'"),
    (["run", "examples/pause_and_step.py"], {"DYNSTEP_DEAD_AFTER": "garbage"}, "DYNSTEP_DEAD_AFTER='garbage'"),
    (["run", "examples/pause_and_step.py"], {"DYNSTEP_DEAD_AFTER": "nan"}, "DYNSTEP_DEAD_AFTER='nan'"),
    (["run", "examples/pause_and_step.py"], {"DYNSTEP_DEAD_AFTER": "-5"}, "DYNSTEP_DEAD_AFTER='-5'"),
    (["run", "examples/pause_and_step.py"], {"DYNSTEP_DAP": "host:port"}, "DYNSTEP_DAP='host:port'"),
    (["report", "no_such.dynstep"], {"DYNSTEP_RANKS": "two"}, "DYNSTEP_RANKS='two'"),
]


@pytest.mark.parametrize("argv,env,words", BAD_CLI, ids=[" ".join(a) + str(e) for a, e, _ in BAD_CLI])
def test_bad_cli_calls(argv, env, words):
    run = subprocess.run([sys.executable, "-m", "dynstep", *argv], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, **env}, timeout=120)
    assert run.returncode == 2, run.stderr
    assert words in run.stderr and run.stderr.count("\n") <= 2 and "Traceback" not in run.stderr


# -- issue 26: DYNSTEP_* ranges at start-up, CheckAction, recordings, DAP messages ----------------------------
def test_26_07_every_dynstep_variable_is_checked_at_start_up_with_its_name():
    for name, value in (("DYNSTEP_RECORD_MEMORY", "99999999T"), ("DYNSTEP_DEAD_AFTER", "nan")):
        run = subprocess.run([sys.executable, "-m", "dynstep", "run", "examples/pause_and_step.py"], cwd=ROOT,
                             capture_output=True, text=True, env={**os.environ, name: value}, timeout=120)
        assert run.returncode == 2 and f"{name}={value!r}" in run.stderr and run.stderr.count("\n") <= 2
    script = "import torch\nf = torch.compile(lambda x: x + 1, backend='superstep', options={'inner': 'eager'})\nf(torch.ones(2))\n"
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DYNSTEP_DEAD_AFTER": "-5"})
    assert run.returncode == 1 and "OptionsError: environment variable DYNSTEP_DEAD_AFTER='-5'" in run.stderr


def test_26_08_check_action_with_a_string_expected_is_a_clear_error():
    with pytest.raises(TypeError, match=r"CheckAction\(expected='abc'\): expected a tensor, a number or a \(nested\) "
                                        r"list of numbers to compare each hit with"):
        dynstep.TensorProbe("p", [dynstep.CheckAction(expected="abc")], when="always")
    probe = dynstep.TensorProbe("ok", [dynstep.CheckAction(expected=[1.0, 2.0])], when="always")
    probe(torch.tensor([1.0, 2.0]))
    probe.assert_ok()
    probe.close()


def _job_recording(tmp_path):
    """A two-rank job's recording (run.dynstep/rank0, rank1) and another recording elsewhere."""
    root = tmp_path / "job.dynstep"
    root.mkdir()
    for rank in (0, 1):
        _save_three(tmp_path / f"r{rank}")
        (tmp_path / f"r{rank}" / "r.dynstep").rename(root / f"rank{rank}")
    other = _save_three(tmp_path / "other")
    return root, other


def test_26_02_a_recording_without_records_jsonl_is_a_storage_error(tmp_path):
    path = _save_three(tmp_path)
    (path / "records.jsonl").unlink()
    assert any(p.name.startswith("chunk-") for p in path.iterdir())              # its chunks are still there
    with pytest.raises(StorageError, match="its index records.jsonl is missing"):
        dynstep.load(path)


def test_26_03_a_rank_symlink_inside_a_job_recording_is_not_followed(tmp_path):
    root, other = _job_recording(tmp_path)
    import shutil

    shutil.rmtree(root / "rank1")
    (root / "rank1").symlink_to(other)                # another recording, elsewhere
    with pytest.warns(RuntimeWarning, match="rank1 is a symbolic link"):
        rec = dynstep.load(root)
    assert rec.ranks == [0] and len(rec) == 3 and "not merged" in rec.problems[0]
    (root / "rank0").rename(tmp_path / "moved")
    (root / "rank0").symlink_to(tmp_path / "moved")
    with pytest.raises(StorageError, match="no rank of this job's recording can be read"):
        dynstep.load(root)


def test_26_09_a_manifest_that_is_a_fifo_is_named_and_never_waited_on(tmp_path):
    """Loading and saving over it, in a subprocess: a FIFO opened for reading would block forever."""
    code = f"""
import os, time, dynstep
import dynstep.recording.reader, dynstep.probe.sessions   # imported before the clock starts
from dynstep.core.errors import StorageError
path = {str(tmp_path / "fifo.dynstep")!r}
os.mkdir(path)
os.mkfifo(os.path.join(path, "manifest.json"))
start = time.monotonic()
for act in (lambda: dynstep.load(path), lambda: dynstep.session(path=path)):
    try:
        act()
    except StorageError as exc:
        print("ERR", exc)
print("took", time.monotonic() - start)
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    errors = [line for line in run.stdout.splitlines() if line.startswith("ERR")]
    assert len(errors) == 2, run.stdout + run.stderr
    assert "the manifest is a FIFO, not a regular file" in errors[0] and "no manifest.json" not in errors[0]
    assert "not a dynstep recording" in errors[1]
    assert float(run.stdout.split("took")[1]) < 10


def _link_to_other(path, name, other):
    (path / name).unlink()
    (path / name).symlink_to(other / name)


def _fifo(path, name):
    (path / name).unlink(missing_ok=True)
    os.mkfifo(path / name)


def _dir(path, name):
    (path / name).unlink()
    (path / name).mkdir()


BAD_RECORDINGS = [   # (what is done to a recording, raised (StorageError) or listed (a problem), the words)
    ("records.jsonl deleted", lambda p, o: (p / "records.jsonl").unlink(), "raised", "records.jsonl is missing"),
    ("records.jsonl a FIFO", lambda p, o: _fifo(p, "records.jsonl"), "raised", "records.jsonl is a FIFO"),
    ("records.jsonl a link", lambda p, o: _link_to_other(p, "records.jsonl", o), "raised", "is a symbolic link"),
    ("records.jsonl a directory", lambda p, o: _dir(p, "records.jsonl"), "raised", "is a directory"),
    ("manifest.json a FIFO", lambda p, o: _fifo(p, "manifest.json"), "raised", "the manifest is a FIFO"),
    ("manifest.json a link", lambda p, o: _link_to_other(p, "manifest.json", o), "raised",
     "the manifest is a symbolic link"),
    ("manifest.json a directory", lambda p, o: _dir(p, "manifest.json"), "raised", "the manifest is a directory"),
    ("compile.jsonl a FIFO", lambda p, o: _fifo(p, "compile.jsonl"), "listed", "compile.jsonl cannot be read"),
    ("compile.jsonl a link", lambda p, o: _link_to_other(p, "compile.jsonl", o), "listed", "is a symbolic link"),
    ("run.json a FIFO", lambda p, o: _fifo(p, "run.json"), "listed", "run.json cannot be read"),
    ("run.json a link", lambda p, o: (p / "run.json").symlink_to(o / "manifest.json"), "listed",
     "run.json is a symbolic link"),
]


@pytest.mark.parametrize("what,change,how,words", BAD_RECORDINGS, ids=[w for w, _, _, _ in BAD_RECORDINGS])
def test_bad_recording_files(tmp_path, what, change, how, words):
    path, other = _save_three(tmp_path / "a"), _save_three(tmp_path / "b")
    change(path, other)
    if how == "raised":
        with pytest.raises(StorageError, match=words):
            dynstep.load(path)
        return
    with pytest.warns(RuntimeWarning, match="problem"):
        rec = dynstep.load(path)
    assert len(rec) == 3 and any(words in p for p in rec.problems), rec.problems


BAD_RANKS = [   # (what is done to a two-rank job recording, raised or listed, the words)
    ("rank1 a link to another recording", lambda r, o: _replace_rank(r, o), "listed", "rank1 is a symbolic link"),
    ("rank1 a file", lambda r, o: _replace_rank(r, None), "listed", "rank1 is a file, not a rank's directory"),
    ("rank1 without records.jsonl", lambda r, o: (r / "rank1" / "records.jsonl").unlink(), "raised",
     "rank1: its index records.jsonl is missing"),
    ("rank1 with a FIFO manifest", lambda r, o: _fifo(r / "rank1", "manifest.json"), "raised", "manifest is a FIFO"),
]


def _replace_rank(root, other):
    import shutil

    shutil.rmtree(root / "rank1")
    if other is None:
        (root / "rank1").write_text("not a recording")
    else:
        (root / "rank1").symlink_to(other)


@pytest.mark.parametrize("what,change,how,words", BAD_RANKS, ids=[w for w, _, _, _ in BAD_RANKS])
def test_bad_job_recordings(tmp_path, what, change, how, words):
    root, other = _job_recording(tmp_path)
    change(root, other)
    if how == "raised":
        with pytest.raises(StorageError, match=words):
            dynstep.load(root)
        return
    with pytest.warns(RuntimeWarning, match="not merged"):
        rec = dynstep.load(root)
    assert rec.ranks == [0] and any(words in p for p in rec.problems), rec.problems


INIT = {"seq": 1, "type": "request", "command": "initialize", "arguments": {"adapterID": "x"}}
BAD_DAP = [   # (messages on one connection to a token-protected server, words in the last error response)
    ([{"seq": 1, "type": "request", "command": "disconnect", "arguments": {"terminateDebuggee": True}}],
     "has not attached; nothing was done"),
    ([INIT, {"seq": 2, "type": "request", "command": "disconnect", "arguments": {"terminateDebuggee": True}}],
     "has not attached"),
    ([{"seq": 1, "type": "request", "command": "terminate"}], "initialize first"),
    ([INIT, {"seq": 2, "type": "request", "command": "terminate"}], "attach first"),
    ([INIT, {"seq": 2, "type": "request", "command": "pause", "arguments": {"threadId": 1}}], "attach first"),
    ([INIT, {"seq": 2, "type": "request", "command": "evaluate", "arguments": {"expression": "exit(3)"}}],
     "attach first"),
    ([INIT, {"seq": 2, "type": "request", "command": "setFunctionBreakpoints",
             "arguments": {"breakpoints": [{"name": "op:relu"}]}}], "attach first"),
    ([INIT, {"seq": 2, "type": "request", "command": "attach", "arguments": {"token": "wrong"}}], "attach refused"),
    ([INIT, {"seq": 2, "type": "request", "command": "attach", "arguments": {"token": ["s3cret"]}}], "attach refused"),
    ([INIT, {"seq": 2, "type": "request", "command": "attach"}], "attach refused"),
    ([INIT, {"seq": 2, "type": "request", "command": "launch", "arguments": {"program": "x.py"}}],
     "use an attach configuration"),
    ([{"seq": 1, "type": "request", "command": "initialize", "arguments": "x"}], "arguments must be an object"),
    ([{"seq": 1, "type": "event", "event": "stopped"}], "not a DAP request"),
    ([{"seq": 1.5, "type": "request", "command": "initialize"}], "an integer seq >= 0"),
    ([{"seq": True, "type": "request", "command": "initialize"}], "an integer seq >= 0"),
    ([{"seq": 3, "type": "request", "command": "initialize", "arguments": {"a": json.loads("[" * 70 + "]" * 70)}}],
     "nested deeper than 64 levels"),
]


@pytest.mark.parametrize("messages,words", BAD_DAP, ids=[str(m[-1])[:70] for m, _ in BAD_DAP])
def test_bad_dap_messages_before_attach(messages, words):
    from dynstep.dap.server import DapServer

    from .dap.test_reliability import _ask

    server = DapServer("127.0.0.1", 0, token="s3cret")
    try:
        answers = _ask(server.port, messages)
        assert answers and not answers[-1]["success"] and words in answers[-1]["message"], answers
        assert not server.terminating
    finally:
        server.close()
