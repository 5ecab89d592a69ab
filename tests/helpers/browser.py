"""A test client for a real headless Chromium, driven by Playwright (the dev extra) over the DevTools protocol.

The test starts the system's Chromium itself (its own process group and profile, ended and removed on close) and
Playwright's client connects to it: nothing is downloaded, `playwright install` is never needed. Tests open
self-contained pages from disk and read what a person's browser would report: console errors, uncaught
exceptions, the requests made, the images drawn, values of JS expressions and screenshots."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

try:  # the dev extra installs it; where it is missing, the browser fixture fails saying so
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright
except ModuleNotFoundError:
    PlaywrightError, sync_playwright = RuntimeError, None

ROOT = Path(__file__).resolve().parents[2]
#: --no-sandbox: Chromium refuses to start as root without it (CI containers run as root); the rest keep a
#: fresh profile quiet: no first-run pages, no background downloads, no GPU
FLAGS = [
    *("--headless=new", "--remote-debugging-port=0", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"),
    *("--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-default-apps"),
    *("--disable-background-networking", "--disable-sync", "--disable-component-update", "--mute-audio"),
    *("--disable-dev-shm-usage", "--window-size=1280,900"),
]
WINDOW = {"width": 1280, "height": 900}  # the page's viewport in CSS pixels (the window's frame takes some)
SETTLE = 0.2  # seconds to keep listening after the load event: late console messages and requests
NO_PLAYWRIGHT = "Playwright is not installed: `make install` (the dev extra) or `pip install playwright`"
#: how the page tells a wait that ran out from an exception the expression threw
TIMED_OUT = "harness-browser: no answer in time"
#: evaluates an expression as Playwright does (global scope, promises awaited) but gives up after `ms`
RACE = """([expression, ms, timedOut]) => Promise.race([
    Promise.resolve(globalThis.eval(expression)),
    new Promise((_, reject) => setTimeout(() => reject(new Error(timedOut)), ms)),
])"""


class BrowserError(RuntimeError):
    """Chromium failed, answered with an error, or did not answer in time."""


class Driver:
    """Playwright's driver, shared by every Browser open at once: a thread can run one sync Playwright at a time."""

    playwright = None
    users = 0

    @classmethod
    def start(cls):
        if cls.users == 0:
            cls.playwright = sync_playwright().start()
        cls.users += 1
        return cls.playwright

    @classmethod
    def stop(cls) -> None:
        cls.users -= 1
        if cls.users == 0:
            playwright, cls.playwright = cls.playwright, None
            # a Chromium gone already: the kill in Browser.close() is what counts
            with contextlib.suppress(Exception):
                playwright.stop()


def find_chromium() -> str | None:
    """The browser to drive: $HARNESS_CHROMIUM if set (None if it is not executable), else one on PATH."""
    if os.environ.get("HARNESS_CHROMIUM"):
        return shutil.which(os.environ["HARNESS_CHROMIUM"])
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


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
        """The value of a JS expression in the page (promises awaited); raises with the text if it throws, or if
        no value comes within the browser's timeout."""
        timeout = self.browser.timeout
        try:
            return self.browser.page.evaluate(RACE, [expression, timeout * 1000, TIMED_OUT])
        except PlaywrightError as error:
            if TIMED_OUT in error.message:
                raise BrowserError(f"no answer to {expression!r} within {timeout:.0f}s") from None
            raise BrowserError(f"{expression!r} threw: {error.message}") from None

    def images(self) -> list[dict]:
        """Every <img> in the document: src (data: URLs cut to 60 characters), complete, natural size."""
        return self.evaluate(
            "Array.from(document.images, i => ({src: i.src.startsWith('data:') ? i.src.slice(0, 60) : i.src,"
            " complete: i.complete, naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight}))"
        )

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        """Write a PNG of the page to `path`: the whole document when full_page, else the window."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.browser.page.screenshot(path=path, full_page=full_page, timeout=self.browser.timeout * 1000)
        return path


class Browser:
    """One headless Chromium process with one page; `with Browser() as b: visit = b.open(path)`."""

    def __init__(self, executable: str | None = None, timeout: float = 30.0):
        self.executable = executable or find_chromium()
        if not self.executable:
            raise BrowserError("no Chromium found: set HARNESS_CHROMIUM or put chromium on PATH")
        if sync_playwright is None:
            raise BrowserError(NO_PLAYWRIGHT)
        self.timeout = timeout
        self.process: subprocess.Popen | None = None
        self.visit: Visit | None = None
        self.tmp: Path | None = None  # the profile's folder, made as the browser starts
        self._driver = self._connection = self.page = None

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
        profile = self.tmp / "profile"
        with open(self.tmp / "stderr.log", "wb") as log:
            self.process = subprocess.Popen(
                [self.executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # its own process group: close() ends the renderers with it
            )
        port = self._devtools_port(profile / "DevToolsActivePort")
        self._driver = Driver.start()
        try:
            self._connection = self._driver.chromium.connect_over_cdp(
                f"http://127.0.0.1:{port}", timeout=self.timeout * 1000
            )
        except PlaywrightError as error:
            raise BrowserError(f"could not connect to Chromium: {error.message}{self._log_tail()}") from None
        context = self._connection.contexts[0]
        self.page = context.pages[0] if context.pages else context.new_page()
        self.page.set_viewport_size(WINDOW)
        self.page.on("console", self._console)
        self.page.on("pageerror", self._exception)
        self.page.on("request", self._request)

    def _devtools_port(self, written: Path) -> int:
        """The port Chromium listens on for DevTools (--remote-debugging-port=0: one it picked), read from the
        file it writes in its profile once it listens."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrowserError(f"Chromium exited at start{self._log_tail()}")
            with contextlib.suppress(FileNotFoundError):
                lines = written.read_text().splitlines()
                if len(lines) == 2:  # the port, then the browser's path: written whole
                    return int(lines[0])
            time.sleep(0.05)
        raise BrowserError(f"Chromium did not listen within {self.timeout:.0f}s{self._log_tail()}")

    def close(self) -> None:
        """End Chromium and every process it started, and remove its profile; safe to call twice."""
        if self._connection is not None:
            # Chromium may be gone already: the kill below is what counts
            with contextlib.suppress(Exception):
                self._connection.close()
        if self._driver is not None:
            Driver.stop()
        self._driver = self._connection = self.page = None
        if self.process is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):  # the second ends any helper the first left behind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(5)
            self.process = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def open(self, path: Path) -> Visit:
        """Load a file in the page and return what the browser reported until shortly after its load event."""
        url = Path(path).resolve().as_uri()
        self.visit = Visit(url, self)  # from here on, events belong to this page
        try:
            self.page.goto(url, wait_until="load", timeout=self.timeout * 1000)
        except PlaywrightError as error:
            raise BrowserError(f"could not open {url}: {error.message}{self._log_tail()}") from None
        self.page.wait_for_timeout(SETTLE * 1000)  # what comes just after: late errors, requests
        return self.visit

    def _console(self, message) -> None:
        """A console.error or console.assert of the page, or the browser's own error (a file that failed to load)."""
        if self.visit is None or message.type not in ("error", "assert"):
            return
        url = message.location.get("url")
        own = not message.args and url  # the browser's own log entry names the file it could not load
        self.visit.console_errors.append(message.text + (f" ({url})" if own else ""))

    def _exception(self, error) -> None:
        """An uncaught exception: the error's stack where it has one (it starts with name and message)."""
        if self.visit is not None:
            self.visit.exceptions.append(error.stack or f"{error.name}: {error.message}")

    def _request(self, request) -> None:
        if self.visit is not None and not request.url.startswith("data:"):
            self.visit.requests.append(request.url)

    def _log_tail(self) -> str:
        """The last lines Chromium printed, for an error message."""
        log = self.tmp / "stderr.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        return "".join(f"\n  chromium: {line}" for line in tail)


@pytest.fixture(scope="module", name="browser")
def fixture_browser():
    """A headless Chromium for a test module; fails (never skips) where none is installed, so CI sees it.
    Import this name (`from tests.helpers.browser import fixture_browser  # noqa: F401`) and ask for `browser`: a
    test argument named like an import is a lint error (F811)."""
    if not find_chromium():
        bad = os.environ.get("HARNESS_CHROMIUM")
        reason = f"HARNESS_CHROMIUM={bad} is not an executable" if bad else "no Chromium found"
        pytest.fail(
            f"{reason}: install Chromium with `make browser` (as root) or `apt-get install chromium`,"
            " or set HARNESS_CHROMIUM to a Chromium/Chrome binary",
            pytrace=False,
        )
    if sync_playwright is None:
        pytest.fail(NO_PLAYWRIGHT, pytrace=False)
    with Browser() as b:
        yield b
