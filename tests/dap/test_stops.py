"""The other kinds of stop over DAP, in-process (the program on a thread, the client in the test):
dynstep.breakpoint()'s compile-time and run-time stops, nan="stop" as an exception stop, stepIn
and stepOut across graphs, conditions, hit counts, dynstep commands in the debug console, and
a program that runs untouched while no client is attached."""

from __future__ import annotations

import threading

import pytest
import torch

import dynstep
from dynstep.dap.api import serve_dap, stop_serving

from .dap import Client


@pytest.fixture
def served():
    server = serve_dap(0)
    client = Client(server.port, timeout=60)
    client.attach()
    yield client
    client.close()
    stop_serving(None)


def run_in_thread(fn):
    out: dict = {}

    def target():
        try:
            out["result"] = fn()
        except BaseException as exc:   # noqa: BLE001 - the test looks at it
            out["error"] = exc

    thread = threading.Thread(target=target, name="program")
    thread.start()
    return thread, out


def stop_and_frames(c: Client):
    stopped = c.wait_event("stopped")["body"]
    frames = c.request("stackTrace", {"threadId": stopped["threadId"]})["stackFrames"]
    return stopped, frames


def variables(c: Client, ref: int) -> dict[str, dict]:
    return {v["name"]: v for v in c.request("variables", {"variablesReference": ref})["variables"]}


def _with_breakpoint(x, w):
    h = x @ w
    dynstep.breakpoint()
    return torch.relu(h) + 1


def test_breakpoint_stops_at_compile_time_then_at_run_time(served):
    c = served
    c.request("configurationDone")
    fn = torch.compile(_with_breakpoint, backend="eager", fullgraph=True)
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    thread, out = run_in_thread(lambda: fn(x, w))
    stopped, frames = stop_and_frames(c)
    assert stopped["reason"] == "compile-time" and frames[0]["line"] == _with_breakpoint.__code__.co_firstlineno + 2
    graph = c.request("source", {"source": frames[1]["source"], "sourceReference": frames[1]["source"]["sourceReference"]})
    assert "matmul" in graph["content"] or "@" in graph["content"]
    scopes = c.request("scopes", {"frameId": frames[0]["id"]})["scopes"]
    assert [s["name"] for s in scopes] == ["Symbolic locals", "Guards", "Compile"]
    assert "FakeTensor float32[3, 5]" in variables(c, scopes[0]["variablesReference"])["h"]["value"]
    assert c.request("evaluate", {"expression": "h.shape", "frameId": frames[0]["id"]})["result"] == "torch.Size([3, 5])"
    c.request("continue", {"threadId": stopped["threadId"]})
    stopped, frames = stop_and_frames(c)                       # the same line, now with real values
    assert stopped["reason"] == "breakpoint"
    node = c.request("scopes", {"frameId": frames[0]["id"]})["scopes"][0]["variablesReference"]
    assert variables(c, node)["h"]["value"].startswith("f32[3, 5] cpu")
    c.request("setVariable", {"variablesReference": node, "name": "h", "value": "h * 0 - 5"})
    c.request("continue", {"threadId": stopped["threadId"]})
    thread.join(60)
    assert torch.equal(out["result"], torch.ones(3, 5)) and c.invalid == []


def test_nan_stop_is_an_exception_stop_naming_node_op_module_and_line(served):
    c = served
    c.request("setExceptionBreakpoints", {"filters": ["nan"]})
    c.request("configurationDone")
    lin = torch.nn.Linear(4, 4)
    fn = torch.compile(lambda x: torch.log(lin(x) - 100.0) * 2, backend=dynstep.superstep(inner="eager", nan="stop"))
    thread, out = run_in_thread(lambda: fn(torch.randn(2, 4)))
    stopped, frames = stop_and_frames(c)
    assert stopped["reason"] == "exception"
    info = c.request("exceptionInfo", {"threadId": stopped["threadId"]})
    assert info["exceptionId"] == "NonFiniteError" and info["breakMode"] == "always"
    assert "log" in info["description"] and "test_stops.py" in info["details"]["stackTrace"]
    c.request("continue", {"threadId": stopped["threadId"]})
    thread.join(60)
    assert torch.isnan(out["result"]).all() and c.invalid == []


def _two_graphs(x):
    y = torch.sin(x) * 3
    torch._dynamo.graph_break()
    return torch.cos(y) + 1


def test_step_in_goes_to_the_next_graph_and_step_out_to_the_next_call(served):
    c = served
    fn = torch.compile(_two_graphs, backend=dynstep.superstep(inner="eager"))
    c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:sin"}]})
    c.request("configurationDone")
    thread, out = run_in_thread(lambda: [fn(torch.ones(3)) for _ in range(2)])
    stopped, frames = stop_and_frames(c)
    first_graph = frames[0]["name"].split("[", 1)[1]
    tid = stopped["threadId"]
    c.request("stepIn", {"threadId": tid})                      # into the graph after the break
    _, frames = stop_and_frames(c)
    assert frames[0]["name"].startswith("cos = ") and frames[0]["name"].split("[", 1)[1] != first_graph
    c.request("setFunctionBreakpoints", {"breakpoints": []})
    c.request("stepOut", {"threadId": tid})                     # the next graph call: the second call's first graph
    _, frames = stop_and_frames(c)
    assert frames[0]["name"].startswith("sin = ")
    c.request("continue", {"threadId": tid})
    thread.join(60)
    assert len(out["result"]) == 2 and c.invalid == []


def test_conditions_hit_counts_and_console_commands(served):
    c = served
    fn = torch.compile(lambda x: torch.relu(x) * 2, backend=dynstep.superstep(inner="eager"))
    c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:relu", "condition": "value.sum() > 100"},
                                                         {"name": "op:mul", "hitCondition": ">= 3"}]})
    c.request("configurationDone")
    thread, out = run_in_thread(lambda: [fn(torch.full((4,), float(i))) for i in range(5)])
    stopped, frames = stop_and_frames(c)
    assert stopped["reason"] == "function breakpoint"
    assert c.request("evaluate", {"expression": "value", "frameId": frames[0]["id"]})["result"] == \
        "f32[4] cpu  [4.0, 4.0, 4.0, 4.0]"                      # the third call (i == 2): hit count 3
    answer = c.request("evaluate", {"expression": "set value = value + 1", "frameId": frames[0]["id"],
                                    "context": "repl"})["result"]
    assert "later nodes see the new value" in answer
    assert "record" in c.request("evaluate", {"expression": "help", "context": "repl"})["result"]
    refused = c.response("evaluate", {"expression": "c", "context": "repl"})
    assert not refused["success"] and "continue/step buttons" in refused["message"]
    c.request("setFunctionBreakpoints", {"breakpoints": []})
    c.request("continue", {"threadId": stopped["threadId"]})
    thread.join(60)
    assert out["result"][2].tolist() == [5.0] * 4 and c.invalid == []


def test_without_a_client_the_program_runs_as_if_no_debugger_were_there():
    server = serve_dap(0)
    try:
        fn = torch.compile(lambda x: torch.relu(x) * 2, backend=dynstep.superstep(inner="eager", pause=["op:relu"]))
        assert fn(torch.ones(2)).tolist() == [2.0, 2.0]              # a pause selector, and nobody to answer it
        assert server.port > 0 and not server.attached()
    finally:
        stop_serving(None)


def _bytecode_target(x):
    y = torch.sin(x) + 1
    return y * 2


def test_bytecode_stepping_over_dap_instructions_disassembly_and_into_the_graph(served):
    c = served
    c.request("configurationDone")
    fn = torch.compile(_bytecode_target, backend="eager")

    def program():
        with dynstep.step_bytecode():
            return fn(torch.ones(3))

    thread, out = run_in_thread(program)
    stopped, frames = stop_and_frames(c)
    assert stopped["reason"] == "entry" and frames[0]["source"]["name"].endswith(".bytecode.py")
    pointer = frames[0]["instructionPointerReference"]
    listing = c.request("disassemble", {"memoryReference": pointer, "instructionOffset": 0, "instructionCount": 3})
    assert len(listing["instructions"]) == 3 and listing["instructions"][0]["address"] == pointer
    names = [s["name"] for s in c.request("scopes", {"frameId": frames[0]["id"]})["scopes"]]
    assert names[0] == "Locals" and names[-1] == "Instruction"
    c.request("next", {"threadId": stopped["threadId"], "granularity": "instruction"})
    _, after = stop_and_frames(c)
    assert after[0]["instructionPointerReference"] != pointer             # one instruction further
    for _ in range(60):                                                    # stepIn until inside the graph
        c.request("stepIn", {"threadId": stopped["threadId"]})
        _, frames = stop_and_frames(c)
        if "graph" in frames[0]["source"]["name"]:
            break
    assert frames[0]["name"].startswith("sin = ")                          # node level, in the compiled graph
    c.request("continue", {"threadId": stopped["threadId"]})
    thread.join(60)
    assert torch.allclose(out["result"], (torch.sin(torch.ones(3)) + 1) * 2) and c.invalid == []
