"""The headless-Chromium test client (tests/helpers/browser.py) catches what it claims: each page here plants
one fault."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from tests.helpers.browser import Browser, BrowserError, find_chromium, fixture_browser, screenshot_dir  # noqa: F401

pytestmark = pytest.mark.slow

#: a 1x1 PNG, inline: a self-contained page's image
DOT = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def page(tmp_path, body: str, name: str = "page.html"):
    path = tmp_path / name
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")
    return path


def alive(group: int) -> list[str]:
    """The processes of a process group that are not dead: neither gone nor a zombie waiting to be reaped."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError):
            continue  # gone while listed
        if int(pgrp) == group and state not in "ZX":
            found.append(stat.parent.name)
    return found


def test_a_clean_page_reports_nothing(browser, tmp_path):
    visit = browser.open(page(tmp_path, f"<p>hello</p><img src='{DOT}'>"))
    assert visit.console_errors == []
    assert visit.exceptions == []
    assert visit.requests == [visit.url]
    [image] = visit.images()
    assert image["src"].startswith("data:image/png") and len(image["src"]) == 60
    assert image["complete"] and image["naturalWidth"] == image["naturalHeight"] == 1


def test_console_errors_are_caught(browser, tmp_path):
    visit = browser.open(
        page(tmp_path, "<script>console.error('planted', 7); console.assert(1 === 2, 'two')</script>")
    )
    assert visit.console_errors == ["planted 7", "two"]


def test_open_waits_for_the_load_event(browser, tmp_path):
    """A page whose scripts take a while: what they report at the end, and on load, is still caught."""
    busy = "const t = Date.now(); while (Date.now() - t < 600) {}"  # longer than the settle after load
    body = f"<script>addEventListener('load', () => console.error('on load')); {busy}</script>"
    visit = browser.open(page(tmp_path, body))
    assert visit.console_errors == ["on load"]


def test_a_thrown_exception_is_caught(browser, tmp_path):
    visit = browser.open(page(tmp_path, "<script>throw new TypeError('planted')</script>"))
    assert len(visit.exceptions) == 1 and "TypeError: planted" in visit.exceptions[0]


def test_a_missing_image_loads_nothing(browser, tmp_path):
    visit = browser.open(page(tmp_path, "<img src='missing.png'>"))
    missing = (tmp_path / "missing.png").as_uri()
    assert visit.images() == [{"src": missing, "complete": True, "naturalWidth": 0, "naturalHeight": 0}]
    assert visit.requests == [visit.url, missing]
    assert any("ERR_FILE_NOT_FOUND" in e for e in visit.console_errors)  # the browser's own log says so


def test_requests_off_the_page_are_recorded(browser, tmp_path):
    """A page meant to be self-contained that reaches for the network: no network here, but the attempt shows."""
    body = "<img src='http://example.invalid/a.png'><script>fetch('https://example.invalid/')</script>"
    visit = browser.open(page(tmp_path, body))
    assert set(visit.requests) >= {"http://example.invalid/a.png", "https://example.invalid/"}


def test_evaluate_returns_values_and_raises_on_a_throw(browser, tmp_path):
    visit = browser.open(page(tmp_path, "<h1>title</h1>"))
    assert visit.evaluate("document.querySelector('h1').textContent") == "title"
    assert visit.evaluate("({a: [1, 2.5, null], b: true})") == {"a": [1, 2.5, None], "b": True}
    assert visit.evaluate("Promise.resolve(6 * 7)") == 42
    assert visit.evaluate("undefined") is None
    with pytest.raises(BrowserError, match="nope"):
        visit.evaluate("(() => { throw new Error('nope') })()")


def test_a_wait_times_out_instead_of_hanging(browser, tmp_path):
    visit = browser.open(page(tmp_path, "<p>waiting</p>"))
    timeout, browser.timeout = browser.timeout, 1
    try:
        with pytest.raises(BrowserError, match="within 1s"):
            visit.evaluate("new Promise(() => {})")  # never settles
    finally:
        browser.timeout = timeout


def test_a_full_page_screenshot_covers_a_tall_page(browser, tmp_path):
    visit = browser.open(page(tmp_path, "<div style='height: 3000px; background: teal'></div>"))
    data = visit.screenshot(tmp_path / "shots" / "tall.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # IHDR, the first chunk
    assert width == 1280 and height > 3000
    window = visit.screenshot(tmp_path / "window.png", full_page=False).read_bytes()
    assert struct.unpack(">II", window[16:24]) == (1280, 900)


def test_a_page_does_not_carry_the_previous_pages_events(browser, tmp_path):
    body = "<img src='gone.png'><script>console.error('first'); setTimeout(() => { throw new Error('late') })</script>"
    first = browser.open(page(tmp_path, body, "first.html"))
    assert first.console_errors and first.exceptions and len(first.requests) == 2
    second = browser.open(page(tmp_path, "<p>clean</p>", "second.html"))
    assert (second.console_errors, second.exceptions, second.requests) == ([], [], [second.url])
    assert len(first.console_errors) == 2 and len(first.exceptions) == 1  # and the first kept its own


def test_chromium_and_its_profile_are_gone_after_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="planted"), Browser() as b:
        pid, profile = b.process.pid, b.tmp
        b.open(page(tmp_path, "<p>x</p>"))
        raise RuntimeError("planted")
    deadline = time.monotonic() + 5  # a killed process takes a moment to die
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert alive(pid) == []
    assert not profile.exists()


def test_where_chromium_and_screenshots_are_found(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CHROMIUM", str(tmp_path / "no-such-browser"))
    assert find_chromium() is None
    monkeypatch.setenv("HARNESS_SCREENSHOTS", str(tmp_path / "shots"))
    assert screenshot_dir() == tmp_path / "shots" and screenshot_dir().is_dir()
