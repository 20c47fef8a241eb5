"""A dynstep command typed in the DAP debug console answers with what that command said, and only that:
while it runs, another thread's probe prints go to the client as `output` events, never into the
answer (core/events.py: a use_sink holds for its own context only)."""

from __future__ import annotations

import threading

import torch

import dynstep
from dynstep.core.events import use_sink
from dynstep.dap.api import serve_dap, stop_serving

from .dap import Client
from .test_stops import run_in_thread, stop_and_frames

PRINTER: dict[str, object] = {}


def _printed(x):
    return torch.relu(x) - 1


def another_thread_prints() -> int:
    """Called from the console command below: another thread runs a compiled program with a `print`
    probe, and this waits for it (so its prints happen while the command's answer is being captured)."""
    thread = threading.Thread(target=PRINTER["fn"], args=(torch.full((3,), 7.0),), name="other")
    thread.start()
    thread.join(60)
    return 7


def test_a_console_command_does_not_capture_another_threads_probe_prints():
    printer = torch.compile(_printed, backend=dynstep.superstep(inner="eager", probe=["op:relu"], actions=["print"]))
    with use_sink(lambda e: None):
        printer(torch.zeros(3))                      # compiled before the server: a graph with no stop points
    PRINTER["fn"] = printer
    server = serve_dap(0)
    c = Client(server.port, timeout=60)
    try:
        c.attach()
        fn = torch.compile(lambda x: torch.relu(x) * 2, backend=dynstep.superstep(inner="eager"))
        c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "op:mul"}]})
        c.request("configurationDone")
        thread, out = run_in_thread(lambda: fn(torch.ones(4)))
        stopped, frames = stop_and_frames(c)
        answer = c.request("evaluate", {"expression": f"set seven = __import__({__name__!r}, fromlist=['x'])"
                                                      ".another_thread_prints()",
                                        "frameId": frames[0]["id"], "context": "repl"})["result"]
        assert answer == "seven bound for later commands"        # the command's own answer, nothing else
        printed = [m["body"]["output"] for m in list(c.received)
                   if m.get("event") == "output" and "relu" in m["body"]["output"]]
        assert len(printed) == 1 and "max 7" in printed[0], printed   # the other thread's print reached the client
        c.request("setFunctionBreakpoints", {"breakpoints": []})
        c.request("continue", {"threadId": stopped["threadId"]})
        thread.join(60)
        assert out["result"].tolist() == [2.0] * 4 and c.invalid == []
    finally:
        c.close()
        stop_serving(None)
