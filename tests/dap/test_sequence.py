"""The whole DAP session a VS Code user goes through, on a transformer block compiled by Inductor on CPU,
through a real socket, every server message validated against the protocol's JSON schema:

initialize -> attach -> setBreakpoints (a user line + a logpoint) + setFunctionBreakpoints (module:) ->
configurationDone -> stopped -> threads -> stackTrace -> source (the graph listing) -> scopes ->
variables (a tensor expanded, paged) -> evaluate -> setVariable (inject; the output equals eager with
the same change) -> next -> logpoint output -> pause while running -> continue -> exited (exit code 3).
"""

from __future__ import annotations

import time

import pytest
import torch

from .dap import MODEL, Client, start_program

LN_LINE, ATTN_LINE, X_LINE, OUT_LINE = 30, 36, 37, 38


def _eager_with_zeroed_attn():
    import importlib.util

    spec = importlib.util.spec_from_file_location("block_model_eager", MODEL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    block = mod.Block().eval()
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        plain = block(x)
        handle = block.proj.register_forward_hook(lambda m, i, o: o * 0)
        changed = block(x)
        handle.remove()
    return x, plain, changed


@pytest.fixture
def program(tmp_path):
    out = tmp_path / "out.safetensors"
    proc, port = start_program("--wait", MODEL, "3", "3", extra_env={"DYNSTEP_TEST_OUT": str(out)})
    client = Client(port)
    yield proc, client, out
    client.close()
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)


def _configure(c: Client) -> None:
    caps = c.request("initialize", {"adapterID": "dynstep", "linesStartAt1": True, "columnsStartAt1": True})
    assert caps["supportsLogPoints"] and caps["supportsSetVariable"] and caps["supportsFunctionBreakpoints"]
    c.request("attach", {"name": "dynstep: attach", "type": "dynstep", "request": "attach"})
    c.wait_event("initialized")
    bps = c.request("setBreakpoints", {"source": {"path": MODEL}, "breakpoints": [
        {"line": ATTN_LINE}, {"line": LN_LINE, "logMessage": "h absmax={value.abs().max():.3f}"}]})["breakpoints"]
    assert [b["verified"] for b in bps] == [False, False]          # nothing compiled yet
    assert "no compiled graph covers line 36 yet" in bps[0]["message"]
    fbps = c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "module:mlp"}, {"name": "module:"}]})
    assert fbps["breakpoints"][1]["verified"] is False and "selector grammar" in fbps["breakpoints"][1]["message"]
    c.request("setExceptionBreakpoints", {"filters": ["nan"]})
    c.request("configurationDone")


def _first_stop(c: Client) -> tuple[int, list[dict]]:
    before: list[dict] = []
    stopped = c.wait_event("stopped", timeout=240, keep=before)["body"]
    assert stopped["reason"] == "breakpoint" and stopped["hitBreakpointIds"]
    changed = [e["body"]["breakpoint"] for e in before if e["event"] == "breakpoint"]
    assert {b["line"] for b in changed if "line" in b} == {LN_LINE, ATTN_LINE} and all(b["verified"] for b in changed)
    logs = [e["body"]["output"] for e in before if e["event"] == "output" and "h absmax=" in e["body"]["output"]]
    assert len(logs) == 1 and float(logs[0].split("=")[1]) > 1.0
    threads = c.request("threads")["threads"]
    assert [t["name"] for t in threads] == ["MainThread"] and threads[0]["id"] == stopped["threadId"]
    frames = c.request("stackTrace", {"threadId": stopped["threadId"]})["stackFrames"]
    return stopped["threadId"], frames


def _look_and_inject(c: Client, frames: list[dict]) -> int:
    graph, user = frames[0], frames[1]
    assert graph["source"]["sourceReference"] > 0 and "path" not in graph["source"]
    assert user["source"]["path"] == MODEL and user["line"] == ATTN_LINE
    assert any(f["name"] == "main" and f["source"]["path"] == MODEL for f in frames[2:])
    listing = c.request("source", {"source": graph["source"], "sourceReference": graph["source"]["sourceReference"]})
    assert listing["content"].splitlines()[graph["line"] - 1].startswith("attn = torch.nn.functional.linear")
    scopes = c.request("scopes", {"frameId": graph["id"]})["scopes"]
    assert [s["name"] for s in scopes] == ["Node", "Site"]
    node = scopes[0]["variablesReference"]
    value = next(v for v in c.request("variables", {"variablesReference": node})["variables"] if v["name"] == "value")
    assert value["value"].startswith("f32[2, 8, 16] cpu") and value["indexedVariables"] == 2
    named = c.request("variables", {"variablesReference": value["variablesReference"], "filter": "named"})
    assert [v["name"] for v in named["variables"]] == ["shape", "dtype", "device", "stats"]
    row = c.request("variables", {"variablesReference": value["variablesReference"], "filter": "indexed",
                                  "start": 1, "count": 1})["variables"]
    assert [(r["name"], r["evaluateName"], r["indexedVariables"]) for r in row] == [("[1]", "value[1]", 8)]
    assert c.request("evaluate", {"expression": "reshape.shape", "frameId": graph["id"], "context": "watch"})[
        "result"] == "torch.Size([2, 8, 16])"                           # a node input by its FX name
    hover = c.request("evaluate", {"expression": "attn", "frameId": user["id"], "context": "hover"})
    assert hover["result"] == value["value"]                            # the user's own name for the value
    bad = c.response("setVariable", {"variablesReference": node, "name": "value", "value": "torch.ones(3)"})
    assert not bad["success"] and "shape [3]" in bad["message"]
    done = c.request("setVariable", {"variablesReference": node, "name": "value", "value": "value * 0"})
    assert "max 0" in done["value"]
    return value["variablesReference"]


def test_a_vscode_session_on_an_inductor_transformer_block(program):
    proc, c, out = program
    _configure(c)
    tid, frames = _first_stop(c)
    stale = _look_and_inject(c, frames)
    c.request("next", {"threadId": tid})
    stepped = c.wait_event("stopped")["body"]
    assert stepped["reason"] == "step"
    assert c.request("stackTrace", {"threadId": tid})["stackFrames"][1]["line"] == X_LINE
    gone = c.response("variables", {"variablesReference": stale})
    assert not gone["success"] and "stale" in gone["message"]
    c.request("continue", {"threadId": tid})
    assert c.wait_event("stopped")["body"]["reason"] == "function breakpoint"      # module:mlp
    c.request("continue", {"threadId": tid})
    kept: list[dict] = []
    assert c.wait_event("stopped", keep=kept)["body"]["reason"] == "breakpoint"    # the second call
    assert any("h absmax=" in e["body"].get("output", "") for e in kept)           # the logpoint, again
    c.request("setBreakpoints", {"source": {"path": MODEL}, "breakpoints": []})
    c.request("setFunctionBreakpoints", {"breakpoints": []})
    c.request("continue", {"threadId": tid})
    time.sleep(0.5)                                                                # it loops for 3 s
    c.request("pause", {"threadId": tid})
    assert c.wait_event("stopped")["body"]["reason"] == "pause"
    c.request("continue", {"threadId": tid})
    assert c.wait_event("exited", timeout=60)["body"]["exitCode"] == 3
    c.wait_event("terminated")
    c.request("disconnect", {})
    assert proc.wait(60) == 3
    assert c.invalid == []
    from safetensors.torch import load_file

    got = load_file(str(out))
    _, plain, changed = _eager_with_zeroed_attn()
    torch.testing.assert_close(got["first"], changed, rtol=1e-4, atol=1e-4)   # the injected change, as in eager
    torch.testing.assert_close(got["second"], plain, rtol=1e-4, atol=1e-4)
    assert (changed - plain).abs().max() > 1e-2
