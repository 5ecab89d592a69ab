"""A small test client for a real headless Chromium: the Chrome DevTools Protocol over --remote-debugging-pipe.

No browser-automation library: Chromium reads NUL-terminated JSON commands from its fd 3 and writes replies and
events to its fd 4. Tests open self-contained pages from disk and read what a person's browser would report.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: --no-sandbox: Chromium refuses to start as root without it (CI containers run as root); the rest keep a
#: fresh profile quiet: no first-run pages, no background downloads, no GPU
FLAGS = [
    *("--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"),
    *("--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-default-apps"),
    *("--disable-background-networking", "--disable-sync", "--disable-component-update", "--mute-audio"),
    *("--disable-dev-shm-usage", "--window-size=1280,900"),
]
WINDOW = {"width": 1280, "height": 900}  # the page's viewport in CSS pixels (the window's frame takes some)
SETTLE = 0.2  # seconds to keep reading after the load event: late console messages and requests


class BrowserError(RuntimeError):
    """Chromium failed, answered with an error, or did not answer in time."""


def find_chromium() -> str | None:
    """The browser to drive: $HARNESS_CHROMIUM if set (None if it is not executable), else one on PATH."""
    if os.environ.get("HARNESS_CHROMIUM"):
        return shutil.which(os.environ["HARNESS_CHROMIUM"])
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def exception_text(details: dict) -> str:
    """A JS exception as DevTools reports it: the error's description with its stack, else the message."""
    return details.get("exception", {}).get("description") or details["text"]


def screenshot_dir() -> Path:
    """Where tests save screenshots for a person to look at: $HARNESS_SCREENSHOTS, else outputs/screenshots."""
    path = Path(os.environ.get("HARNESS_SCREENSHOTS") or ROOT / "outputs" / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Visit:
    """One page load and what the browser reported while it was the current page."""

    url: str
    browser: Browser = field(repr=False)
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def evaluate(self, expression: str):
        """The value of a JS expression in the page (promises awaited); raises with the text if it throws."""
        reply = self.browser.page(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} threw: {exception_text(reply['exceptionDetails'])}")
        return reply["result"].get("value")

    def images(self) -> list[dict]:
        """Every <img> in the document: src (data: URLs cut to 60 characters), complete, natural size."""
        return self.evaluate(
            "Array.from(document.images, i => ({src: i.src.startsWith('data:') ? i.src.slice(0, 60) : i.src,"
            " complete: i.complete, naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight}))"
        )

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        """Write a PNG of the page to `path`: the whole document when full_page, else the window."""
        params: dict = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            size = self.browser.page("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.browser.page("Page.captureScreenshot", **params)["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


class Browser:
    """One headless Chromium process with one page; `with Browser() as b: visit = b.open(path)`."""

    def __init__(self, executable: str | None = None, timeout: float = 30.0):
        self.executable = executable or find_chromium()
        if not self.executable:
            raise BrowserError("no Chromium found: set HARNESS_CHROMIUM or put chromium on PATH")
        self.timeout = timeout
        self.process: subprocess.Popen | None = None
        self.session: str | None = None
        self.visit: Visit | None = None
        self._pipes: list[int] = []
        self._buffer = b""
        self._next_id = 0
        self._replies: dict[int, dict] = {}
        self._loaded = False

    def __enter__(self) -> Browser:
        self.tmp = Path(tempfile.mkdtemp(prefix="harness-chromium-"))
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        commands, self._to_chromium = os.pipe()  # Chromium reads its fd 3 ...
        self._from_chromium, replies = os.pipe()  # ... and writes its fd 4
        self._pipes = [commands, self._to_chromium, self._from_chromium, replies]
        # bash moves the pipes to fds 3 and 4 (a preexec_fn is unsafe with threads; dash takes fds 0-9 only)
        shell = f'exec "$0" "$@" 3<&{commands} 4>&{replies}'
        profile = f"--user-data-dir={self.tmp / 'profile'}"
        with open(self.tmp / "stderr.log", "wb") as log:
            self.process = subprocess.Popen(
                ["bash", "-c", shell, self.executable, *FLAGS, profile, "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(commands, replies),
                start_new_session=True,  # its own process group: close() ends the renderers with it
            )
        for fd in (commands, replies):  # Chromium's ends: closed here so a dead Chromium reads as end of file
            os.close(fd)
            self._pipes.remove(fd)
        attached = self.send("Target.attachToTarget", targetId=self._page_target(), flatten=True)
        self.session = attached["sessionId"]  # flatten: page commands go on this pipe, tagged with it
        self.page("Emulation.setDeviceMetricsOverride", **WINDOW, deviceScaleFactor=1, mobile=False)

    def _page_target(self) -> str:
        """The id of the page Chromium opens at start (it shows up shortly after the browser does)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for target in self.send("Target.getTargets")["targetInfos"]:
                if target["type"] == "page":
                    return target["targetId"]
            time.sleep(0.05)
        raise BrowserError(f"Chromium showed no page within {self.timeout:.0f}s{self._log_tail()}")

    def close(self) -> None:
        """End Chromium and every process it started, and remove its profile; safe to call twice."""
        if self.process is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):  # the second ends any helper the first left behind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(5)
            self.process = None
        while self._pipes:
            os.close(self._pipes.pop())
        shutil.rmtree(self.tmp, ignore_errors=True)

    def open(self, path: Path) -> Visit:
        """Load a file in the page and return what the browser reported until shortly after its load event."""
        url = Path(path).resolve().as_uri()
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.page(f"{domain}.enable")
        self.visit, self._loaded = Visit(url, self), False  # from here on, events belong to this page
        reply = self.page("Page.navigate", url=url)
        if reply.get("errorText"):
            raise BrowserError(f"could not open {url}: {reply['errorText']}")
        self._read_until(lambda: self._loaded, f"the load event of {url}")
        self._read_until(lambda: False, None, seconds=SETTLE)  # what comes just after: late errors, requests
        return self.visit

    def page(self, method: str, **params) -> dict:
        """Send a command to the page and return its result."""
        return self.send(method, session=self.session, **params)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        """Send a command (to the browser, or to a session) and return its result, recording events meanwhile."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._to_chromium, data) :]
        key = self._next_id
        self._read_until(lambda: key in self._replies, f"answer to {method}")
        reply = self._replies.pop(key)
        if "error" in reply:
            raise BrowserError(f"{method} failed: {reply['error'].get('message')}")
        return reply.get("result", {})

    def _read_until(self, done, what: str | None, seconds: float | None = None) -> None:
        """Read messages until done() is true; after `seconds` (default: the timeout), raise that no `what`
        came, or return if `what` is None."""
        deadline = time.monotonic() + (self.timeout if seconds is None else seconds)
        while not done():
            if b"\0" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    if what is None:
                        return
                    raise BrowserError(f"no {what} within {self.timeout:.0f}s{self._log_tail()}")
                if select.select([self._from_chromium], [], [], left)[0]:
                    chunk = os.read(self._from_chromium, 1 << 16)
                    if not chunk:
                        raise BrowserError(f"Chromium exited while waiting for {what}{self._log_tail()}")
                    self._buffer += chunk
                continue
            raw, self._buffer = self._buffer.split(b"\0", 1)
            self._handle(json.loads(raw))

    def _handle(self, message: dict) -> None:
        """A reply to the command waited on, or an event to record on the current visit."""
        if "id" in message:
            self._replies[message["id"]] = message
            return
        if message.get("sessionId") != self.session or self.visit is None:
            return
        method, params, visit = message["method"], message.get("params", {}), self.visit
        if method == "Page.loadEventFired":
            self._loaded = True
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            args = params.get("args", [])
            visit.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]  # the browser's own errors: a file or image that failed to load
            visit.console_errors.append(entry["text"] + (f" ({entry['url']})" if entry.get("url") else ""))
        elif method == "Runtime.exceptionThrown":
            visit.exceptions.append(exception_text(params["exceptionDetails"]))
        elif method == "Network.requestWillBeSent" and not params["request"]["url"].startswith("data:"):
            visit.requests.append(params["request"]["url"])

    def _log_tail(self) -> str:
        """The last lines Chromium printed, for an error message."""
        log = self.tmp / "stderr.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        return "".join(f"\n  chromium: {line}" for line in tail)


@pytest.fixture(scope="module", name="browser")
def fixture_browser():
    """A headless Chromium for a test module; fails (never skips) where none is installed, so CI sees it.
    Import this name (`from tests.browser import fixture_browser  # noqa: F401`) and ask for `browser`: a test
    argument named like an import is a lint error (F811)."""
    if not find_chromium():
        bad = os.environ.get("HARNESS_CHROMIUM")
        reason = f"HARNESS_CHROMIUM={bad} is not an executable" if bad else "no Chromium found"
        pytest.fail(
            f"{reason}: install Chromium with `make browser` (as root) or `apt-get install chromium`,"
            " or set HARNESS_CHROMIUM to a Chromium/Chrome binary",
            pytrace=False,
        )
    with Browser() as b:
        yield b
