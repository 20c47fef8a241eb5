"""Issue 30 item 2, the editor's side: every stage of every compile as DAP sources (`loadedSources`,
"Loaded Scripts" in VS Code), read through the protocol by a schema-checked client at a stop."""

from __future__ import annotations

import threading

import torch

from dynstep.dap.api import serve_dap, stop_serving

from ..dap.dap import Client


def f(x, w):
    h = torch.sin(x) @ w
    return torch.relu(h).sum()


def test_loaded_sources_hold_every_stage_of_the_compile():
    server = serve_dap(0)
    c = Client(server.port, timeout=60)
    try:
        assert c.attach() is not None
        c.request("configurationDone")
        fn = torch.compile(f, backend="superstep", options={"inner": "aot_eager", "pause": ["op:sin"]})
        result: dict = {}
        thread = threading.Thread(target=lambda: result.update(out=fn(torch.ones(2, 2), torch.ones(2, 2))))
        thread.start()
        stopped = c.wait_event("stopped")["body"]
        sources = c.request("loadedSources")["sources"]
        names = [s["name"] for s in sources]
        assert {"f[0_0].dynamo.py", "f[0_0].aot.py", "f[0_0].bytecode.py"} <= set(names), names
        aot = next(s for s in sources if s["name"] == "f[0_0].aot.py")
        assert aot["origin"].startswith("AOTAutograd's forward graph · compile 0/0")
        text = c.request("source", {"source": aot, "sourceReference": aot["sourceReference"]})["content"]
        assert "torch.ops.aten.sin.default" in text and "# File: " in text and "in f, code: h = torch.sin(x) @ w" in text
        again = c.request("loadedSources")["sources"]
        def key(s: dict) -> object:   # a stage or listing has a reference; a user's file has its path
            return s.get("sourceReference") or s["path"]

        assert [key(s) for s in again] == [key(s) for s in sources]   # stable refs
        c.request("continue", {"threadId": stopped["threadId"]})
        thread.join(60)
        assert float(result["out"]) > 0
    finally:
        c.close()
        stop_serving(None)
