"""Headless Chromium for the tests, over the DevTools protocol on a pipe (standard library only).

Chromium started with ``--remote-debugging-pipe`` reads commands on fd 3 and writes replies and
events on fd 4, each message JSON ended by a NUL byte: no port, no websocket package.

    with Chromium() as browser:
        page = browser.open("report.html", screenshot="shot.png")
    page.errors      console.error/assert, uncaught exceptions, log errors (CSP, failed loads)
    page.requests    every URL the page asked for (the page's own file:// URL included)
    page.remote      those that are not file:, data:, blob: or about:
    page.ready       the JSON value of window.__dynstepReady, once the page set it
    page.evaluate(js) / page.seconds (navigation to ready)

`find()` is None when no Chromium is installed: tests skip then.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe",
         "--host-resolver-rules=MAP * ~NOTFOUND"]   # nothing resolves: a request can only fail
LOCAL = ("file:", "data:", "blob:", "about:", "chrome-error:")


def find() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


class ProtocolError(RuntimeError):
    pass


@dataclasses.dataclass
class Page:
    browser: "Chromium"
    session: str
    errors: list[str]
    requests: list[str]
    ready: Any
    seconds: float

    @property
    def remote(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(LOCAL)]

    def evaluate(self, js: str) -> Any:
        """The JSON value of a JavaScript expression (awaited when it is a promise)."""
        res = self.browser.send("Runtime.evaluate", {"expression": f"(async () => JSON.stringify(await ({js})))()",
                                                     "returnByValue": True, "awaitPromise": True}, self.session)
        if "exceptionDetails" in res:
            raise ProtocolError(f"{js!r}: {res['exceptionDetails'].get('exception', {}).get('description')}")
        value = res["result"].get("value")
        return json.loads(value) if value is not None else None

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.browser.targets.pop(self.session)})


class Chromium:
    def __init__(self, width: int = 1360, height: int = 900) -> None:
        self.exe = find()
        if self.exe is None:
            raise FileNotFoundError("no chromium on PATH (apt-get install -y chromium)")
        self.size = (width, height)
        self.targets: dict[str, str] = {}

    def __enter__(self) -> "Chromium":
        self.profile = tempfile.mkdtemp(prefix="dynstep-chromium-")
        cmd_r, cmd_w = os.pipe()      # our commands -> Chromium's fd 3
        out_r, out_w = os.pipe()      # Chromium's fd 4 -> us

        def child() -> None:          # before exec: the pipe ends onto fds 3 and 4 (inheritable)
            import fcntl
            a, b = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        # close_fds=False: pass_fds would renumber; Python's own descriptors are close-on-exec anyway
        self.proc = subprocess.Popen([self.exe, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=child, close_fds=False)
        os.close(cmd_r)
        os.close(out_w)
        self.w, self.r = cmd_w, out_r
        self.buf, self.next_id, self.events = b"", 0, []
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass   # it may be gone already: it is killed below
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.w, self.r):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise TimeoutError("no message from chromium")
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise ProtocolError("chromium closed the pipe")
            self.buf += chunk
        message, self.buf = self.buf.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise ProtocolError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _wait(self, method: str, session: str, deadline: float) -> None:
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self.events):
            self.events.append(self._read(deadline))

    def open(self, path: str | Path, *, screenshot: str | Path | None = None, timeout: float = 30,
             full_page: bool = False) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.targets[session] = target
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.size[0], "height": self.size[1],
                                                         "deviceScaleFactor": 1, "mobile": False}, session)
        self.events.clear()
        start = time.perf_counter()
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()}, session)
        deadline = time.monotonic() + timeout
        self._wait("Page.loadEventFired", session, deadline)
        page = Page(self, session, [], [], None, 0.0)
        while page.evaluate("window.__dynstepReady || null") is None:
            if time.monotonic() > deadline:
                break   # a page that never got ready: its errors say why
            time.sleep(0.02)
        page.seconds = time.perf_counter() - start
        page.ready = page.evaluate("window.__dynstepReady || null")
        if screenshot is not None:
            self._screenshot(session, screenshot, full_page)
        page.errors, page.requests = _errors_and_requests([e for e in self.events if e.get("sessionId") == session])
        return page

    def _screenshot(self, session: str, path: str | Path, full_page: bool) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 12000), "scale": 1})
        Path(path).write_bytes(base64.b64decode(self.send("Page.captureScreenshot", params, session)["data"]))


def _errors_and_requests(events: list[dict]) -> tuple[list[str], list[str]]:
    errors, requests = [], []
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description", "")))
                                                                for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            errors.append("exception: " + (d.get("exception", {}).get("description") or d.get("text", "")))
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            errors.append(f"log.{p['entry']['source']}: {p['entry']['text']} {p['entry'].get('url', '')}".strip())
        elif method == "Network.requestWillBeSent":
            requests.append(p["request"]["url"])
    return errors, requests
