"""dynstep and debugpy in one process, two DAP sessions side by side (what VS Code's compound launch
configuration does): neither server freezes the other, and each one's pause works."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dynstep.dap.client import DapClient

from .dap import MODEL, ROOT, Client, env, free_port, listening_port

pytest.importorskip("debugpy")


def start_under_debugpy() -> tuple[subprocess.Popen, int, int]:
    debugpy_port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "debugpy", "--listen", f"127.0.0.1:{debugpy_port}", "-m", "dynstep",
                             "run", "--dap", "0", "--wait", "--inner", "eager", MODEL, "0", "4"], cwd=str(ROOT),
                            env=env(), stderr=subprocess.PIPE, text=True)
    return proc, listening_port(proc, 240, "no dynstep server in the debugpy-run program"), debugpy_port


def attach_debugpy(port: int) -> DapClient:
    dbg = DapClient("127.0.0.1", port, timeout=30)
    dbg.request("initialize", {"adapterID": "debugpy", "clientID": "test", "linesStartAt1": True,
                               "columnsStartAt1": True, "pathFormat": "path"})
    attached = dbg.send("attach", {"justMyCode": True})     # debugpy answers attach after configurationDone
    dbg.wait_event("initialized")
    dbg.request("configurationDone")
    assert attached.get(timeout=30)["success"]
    return dbg


def test_dynstep_and_debugpy_sessions_in_one_process():
    proc, port, debugpy_port = start_under_debugpy()
    dyn = Client(port)
    try:
        dyn.attach()
        dyn.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:layer_norm"}]})
        dyn.request("configurationDone")
        dbg = attach_debugpy(debugpy_port)
        stopped = dyn.wait_event("stopped", timeout=240)["body"]            # dynstep holds the program thread
        thread = dbg.request("threads")["threads"][0]["id"]                 # debugpy still answers
        dbg.request("pause", {"threadId": thread})                          # its pause waits for dynstep
        frames = dyn.request("stackTrace", {"threadId": stopped["threadId"]})["stackFrames"]
        assert dyn.request("evaluate", {"expression": "value.shape", "frameId": frames[0]["id"]})["result"] == \
            "torch.Size([2, 8, 16])"                                         # dynstep still answers
        dyn.request("setFunctionBreakpoints", {"breakpoints": []})
        dyn.request("continue", {"threadId": stopped["threadId"]})
        assert dbg.wait_event("stopped", timeout=30)["body"]["reason"] == "pause"   # debugpy's turn
        assert dyn.request("threads")["threads"]                            # dynstep answers while debugpy holds
        dyn.request("pause", {"threadId": stopped["threadId"]})
        dbg.request("continue", {"threadId": thread})
        assert dyn.wait_event("stopped", timeout=30)["body"]["reason"] == "pause"
        dyn.request("continue", {"threadId": stopped["threadId"]})
        assert dyn.wait_event("exited", timeout=60)["body"]["exitCode"] == 0
        dyn.request("disconnect", {})
        assert proc.wait(60) == 0 and dyn.invalid == []
    finally:
        dyn.close()
        if proc.poll() is None:
            proc.kill()
