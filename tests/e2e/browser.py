"""Headless Chromium driven over its DevTools protocol, for pages a test has to use, not just load
(JupyterHub's login and spawn forms, JupyterLab's notebook: issue 31).

Debian's chromium, started with --remote-debugging-port=0 (it listens on 127.0.0.1 only and writes
the port it chose into DevToolsActivePort), one page, and the protocol's own commands over a
websocket: Page.navigate, Runtime.evaluate, Input.insertText/dispatchKeyEvent, Page.captureScreenshot.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, profile: Path, width: int = 1280, height: int = 900):
        assert CHROMIUM, "needs Debian's chromium (scripts/host-setup.sh installs it)"
        profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "--remote-debugging-port=0",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc.poll() is None, "chromium exited at start"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, open_timeout=30)
        self._ids = itertools.count(1)
        self.send("Page.enable")  # its events include the dialogs, which send() answers

    def send(self, method: str, timeout: float = 120, **params) -> dict:
        i = next(self._ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("method") == "Page.javascriptDialogOpening":
                # "Leave site? Changes you made may not be saved" (a notebook left with changes): leave
                self.ws.send(json.dumps({"id": next(self._ids), "method": "Page.handleJavaScriptDialog",
                                         "params": {"accept": True}}))
            if msg.get("id") == i:
                assert "error" not in msg, f"{method}: {msg['error']}"
                return msg.get("result", {})

    def js(self, expression: str, timeout: float = 120):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        r = self.send("Runtime.evaluate", timeout=timeout, expression=expression, awaitPromise=True,
                      returnByValue=True)
        assert "exceptionDetails" not in r, f"{expression[:200]}: {r['exceptionDetails']}"
        return r["result"].get("value")

    def go(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.until("document.readyState === 'complete' && location.href !== 'about:blank'", 300, f"{url} to load")

    def until(self, expression: str, timeout: float, what: str, every: float = 1.0):
        """Waits until the expression is truthy in the page (a page that navigates meanwhile is asked again)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self.js(expression, timeout=30)
            except (AssertionError, TimeoutError):
                got = None  # the page navigated away under the evaluation
            if got:
                return got
            assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what} (at {self.url})"
            time.sleep(every)

    @property
    def url(self) -> str:
        return self.js("location.href", timeout=30)

    def text(self) -> str:
        return self.js("document.body ? document.body.innerText : ''", timeout=30)

    def type(self, text: str) -> None:
        self.send("Input.insertText", text=text)

    def key(self, key: str, code: str, keycode: int, modifiers: int = 0) -> None:
        """A key press (modifiers: 8 = Shift)."""
        for kind in ("rawKeyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, code=code, windowsVirtualKeyCode=keycode,
                      modifiers=modifiers)

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
