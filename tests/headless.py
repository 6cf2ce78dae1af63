"""A headless Chromium for the tests and the bench: a page loaded from disk, driven through the
DevTools protocol over a pipe (`--remote-debugging-pipe`: JSON messages separated by NUL
bytes on file descriptors 3 and 4), so no websocket library and no network are needed.

    with Browser() as browser:
        page = browser.open(path)          # waits for the load event
        page.evaluate("document.title")
        page.errors                        # console errors and uncaught exceptions
        page.screenshot(png_path, width, height)

`chromium_path()` is None when no Chromium is installed (Debian's `chromium`); the tests
skip then, saying so.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_path() -> str | None:
    """The browser to drive: $KVSCHED_CHROMIUM, else the first of CANDIDATES on the PATH."""
    given = os.environ.get("KVSCHED_CHROMIUM")
    if given:
        return given if shutil.which(given) else None
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium process with a pipe to its DevTools protocol."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._next = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        path = chromium_path()
        if path is None:
            raise BrowserError("no chromium on the PATH")
        self._profile = tempfile.mkdtemp(prefix="kvsched-chromium-")
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()

        def fds() -> None:  # the child's 3 reads commands, its 4 writes answers
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [path, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-sync", "--mute-audio",
             "--hide-scrollbars", f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds, pass_fds=(3, 4))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._write = to_browser_w
        self._read = from_browser_r
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):  # it is going away anyway
            self.call("Browser.close", timeout=5)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._write, self._read):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    # -- the protocol ---------------------------------------------------------------
    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> int:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        return self._next

    def _receive(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("timed out waiting for chromium")
            ready, _, _ = select.select([self._read], [], [], left)
            if ready:
                chunk = os.read(self._read, 1 << 20)
                if not chunk:
                    raise BrowserError("chromium closed its pipe")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float | None = None) -> dict[str, Any]:
        """Send a command and wait for its answer (events on the way are kept)."""
        ident = self.send(method, params, session)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            message = self._receive(deadline)
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    def wait_event(self, method: str, session: str | None = None,
                   timeout: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and (session is None
                                                      or event.get("sessionId") == session):
                    return self._events.pop(i)
            self._events.append(self._receive(deadline))

    def open(self, path: Path, width: int = 1400, height: int = 1000) -> Page:
        """A new tab showing `path` (a file), once its load event has fired."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        page = Page(self, session, target)
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain, session=session)
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session)
        page.navigate(path)
        return page


class Page:
    """One tab."""

    def __init__(self, browser: Browser, session: str, target: str) -> None:
        self.browser = browser
        self.session = session
        self.target = target

    def close(self) -> None:
        self.browser.call("Target.closeTarget", {"targetId": self.target})

    def navigate(self, path: Path) -> float:
        """Load `path`; the seconds until its load event."""
        began = time.monotonic()
        self.browser.call("Page.navigate", {"url": Path(path).resolve().as_uri()},
                          session=self.session)
        self.browser.wait_event("Page.loadEventFired", self.session)
        return time.monotonic() - began

    def goto(self, url: str) -> None:
        """Load any URL (chrome://..., say), waiting for its load event."""
        self.browser.call("Page.navigate", {"url": url}, session=self.session)
        self.browser.wait_event("Page.loadEventFired", self.session)

    def evaluate(self, expression: str, timeout: float | None = None) -> Any:
        """The value of a JavaScript expression (a promise is awaited)."""
        result = self.browser.call("Runtime.evaluate", {
            "expression": expression, "awaitPromise": True, "returnByValue": True},
            session=self.session, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"{expression[:60]}: {text}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Poll until `expression` is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression}")
            time.sleep(0.02)

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries so far."""
        found = []
        for event in self.browser._events:
            if event.get("sessionId") != self.session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                found.append(details.get("exception", {}).get("description")
                             or details.get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error",
                                                                                "assert"):
                found.append(" ".join(str(a.get("value", a.get("description", "")))
                                      for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(params["entry"].get("text", "error"))
        return found

    def screenshot(self, path: Path, width: int, height: int,
                   clip: tuple[float, float, float, float] | None = None) -> Path:
        """A PNG of the page's top `width` x `height` pixels (of `clip`, x, y, width and
        height in the page, when given)."""
        self.browser.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=self.session)
        params: dict[str, Any] = {"format": "png"}
        if clip is not None:
            x, y, w, h = clip
            params |= {"clip": {"x": x, "y": y, "width": w, "height": h, "scale": 1},
                       "captureBeyondViewport": True}
        data = self.browser.call("Page.captureScreenshot", params,
                                 session=self.session)["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)
