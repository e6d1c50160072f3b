"""Headless Chromium driven over the Chrome DevTools Protocol, for the tests that open a page as a person would.

Why CDP rather than `chromium --dump-dom` and a script injected into a copy of the page: the browser itself
reports every console message, uncaught exception and failed load (`Runtime.*`, `Log.entryAdded`), including
those before any script of the page runs; the page under test is opened unchanged; and the DOM checks and the
screenshot come from the same loaded page. The client is `websockets`' synchronous one (no browser driver).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
NO_BROWSER = "no chromium on PATH (CI installs Debian's: .ci/run)"
# Root (CI, containers) needs --no-sandbox; the rest keeps a headless browser off the network and quiet.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
]
# Where a test that makes a docs figure also copies it: `TWINKLE_DOC_IMAGES=docs/img python -m pytest ...`.
DOC_IMAGES = os.environ.get("TWINKLE_DOC_IMAGES")


class Page:
    """One browser tab. `errors`: every console error, uncaught exception and failed load since it opened."""

    def __init__(self, socket: Any) -> None:
        self._socket = socket
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        self._events: list[dict] = []

    def send(self, method: str, timeout: float = 30, **params: Any) -> dict:
        """Call `method` and return its result, keeping the events that arrive meanwhile."""
        call_id = next(self._ids)
        self._socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(deadline, method)
            if message.get("id") == call_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})

    def wait_for(self, event: str, timeout: float = 30) -> dict:
        """The first `event` not yet waited for (one that came during `send` counts)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, seen in enumerate(self._events):
                if seen["method"] == event:
                    return self._events.pop(i)["params"]
            self._receive(deadline, event)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values only)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str, timeout: float = 60) -> None:
        """Navigate to `url` and wait for its load event (every image of the page loaded or failed)."""
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise AssertionError(f"{url}: {result['errorText']}")
        self.wait_for("Page.loadEventFired", timeout)

    def wait_until(self, expression: str, timeout: float = 60) -> None:
        """Poll until a JavaScript expression is true (a page that renders from data it fetches)."""
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise AssertionError(f"not true within {timeout} s: {expression}")
            time.sleep(0.25)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the viewport, written to `path` (and copied to $TWINKLE_DOC_IMAGES when set)."""
        data = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        if DOC_IMAGES:
            Path(DOC_IMAGES).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(DOC_IMAGES) / path.name)
        return path

    def _receive(self, deadline: float, waiting_for: str) -> dict:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"no answer from the browser for {waiting_for}; errors so far: {self.errors}"
            )
        message = json.loads(self._socket.recv(timeout=left))
        if "method" in message:
            self._note(message)
        return message

    def _note(self, event: dict) -> None:
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(
                f"console.{params['type']}: {[a.get('value') for a in params.get('args', [])]}"
            )
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(f"exception: {details.get('exception', {}).get('description') or details}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
        else:
            self._events.append(event)


def _debugging_port(profile: Path, process: subprocess.Popen, log: Path, timeout: float = 30) -> int:
    """The port Chromium chose (--remote-debugging-port=0), from the file it writes into its profile."""
    deadline = time.monotonic() + timeout
    port_file = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"chromium exited with {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int(port_file.read_text().splitlines()[0])
        time.sleep(0.1)
    raise AssertionError(f"chromium wrote no {port_file} within {timeout} s")


@contextlib.contextmanager
def chromium(workdir: Path, width: int = 1280, height: int = 1000) -> Iterator[Page]:
    """A headless Chromium with a fresh profile under `workdir`, and its one tab at `width` x `height`."""
    from websockets.sync.client import connect

    assert CHROMIUM is not None, NO_BROWSER
    profile, log = workdir / "chromium-profile", workdir / "chromium.log"
    profile.mkdir(parents=True)
    with log.open("w") as log_file:  # a file, not a pipe: Chromium logs plenty (D-Bus) and would fill one
        process = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    try:
        port = _debugging_port(profile, process, log)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            tab = next(t for t in json.load(answer) if t["type"] == "page")
        with connect(tab["webSocketDebuggerUrl"], max_size=None, open_timeout=10) as socket:
            page = Page(socket)
            for domain in ("Page", "Runtime", "Log"):
                page.send(f"{domain}.enable")
            page.send(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            yield page
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
