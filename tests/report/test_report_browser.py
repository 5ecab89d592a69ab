"""The pages of real runs opened in a real headless Chromium (tests/helpers/browser.py): a PASS run, a PREFLIGHT_FAIL
run, a run stopped by a signal and a 3-job sweep. Each page loads with no console error and no request but its own file,
every image has drawn, the failures come first, the sweep's links reach each job's page; a screenshot of each is
saved (tests/helpers/browser.py screenshot_dir; `make screenshots` copies those the docs show into docs/img/)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from harness.report.run_page import PAGE
from harness.report.verdict import read_verdict
from tests.conftest import ROOT, needs_probes, start_train, train, wait_for_steps
from tests.helpers.browser import fixture_browser, screenshot_dir  # noqa: F401  (the browser fixture)

pytestmark = [pytest.mark.slow, needs_probes]  # real train.py runs and a browser: ~40 s in all


def loaded_cleanly(visit, images: int = 1) -> None:
    """No console error, no uncaught exception, no request but the page's own file, every image drawn (at least
    `images` of them)."""
    assert visit.console_errors == [] and visit.exceptions == [], (visit.console_errors, visit.exceptions)
    assert visit.requests == [visit.url], visit.requests
    drawn = visit.images()
    assert len(drawn) >= images, drawn
    assert all(i["complete"] and i["naturalWidth"] > 0 and i["naturalHeight"] > 0 for i in drawn), drawn


def shot(visit, name: str, at: str | None = None) -> Path:
    """The whole page as NAME.png, and one window of it (from the element `at`, else the top) as NAME_view.png: the
    pictures of docs/img/ (`make screenshots`)."""
    path = visit.screenshot(screenshot_dir() / f"{name}.png")
    assert path.stat().st_size > 10_000
    visit.evaluate(f"document.getElementById('{at}').scrollIntoView()" if at else "window.scrollTo(0, 0)")
    view = visit.screenshot(screenshot_dir() / f"{name}_view.png", full_page=False)
    assert view.stat().st_size > 10_000
    return path


def rows(visit, table: str) -> list[str]:
    return visit.evaluate(f"[...document.querySelectorAll('#{table} tbody tr')].map(r => r.dataset.status)")


def test_the_page_of_a_passing_run(browser, tmp_path, data_root):
    result = train("n=2", cwd=tmp_path, data_root=data_root)
    assert result.returncode == 0, result.stderr[-3000:]
    visit = browser.open(tmp_path / "run" / PAGE)
    loaded_cleanly(visit, images=5)  # heat maps of gradient norms and update ratios; the probes' 3 PNGs
    assert visit.evaluate("document.documentElement.dataset.status") == "PASS"
    assert "reached the goal" in visit.evaluate("document.getElementById('verdict').textContent")
    charts = visit.evaluate("document.querySelectorAll('#curves svg.chart').length")
    assert charts >= 3  # loss, p_correct, reach
    assert visit.evaluate("document.querySelectorAll('#datapoints h3').length") == 2  # first and last steps
    shot(visit, "run_pass")
    shot(visit, "run_pass_curves", at="curves")
    sort = "document.querySelector('#preflight th:nth-child(3)').click();"  # seconds: sorted as numbers
    order = visit.evaluate(
        sort + "[...document.querySelectorAll('#preflight tbody td:nth-child(3)')].map(c => +c.dataset.sort)"
    )
    assert order == sorted(order) and len(order) > 10
    whole = "document.querySelectorAll('#config table')[1]"  # a table after the first sorts as well
    visit.evaluate(f"{whole}.querySelector('th').click()")
    keys = visit.evaluate(f"[...{whole}.tBodies[0].rows].map(r => r.cells[0].textContent)")
    ordered = visit.evaluate(
        f"(k => k.every((x, i) => i === 0 || k[i - 1].localeCompare(x) <= 0))({json.dumps(keys)})"
    )
    assert ordered and visit.exceptions == [], visit.exceptions


def test_the_page_of_a_run_the_preflight_stopped(browser, tmp_path, data_root):
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = train(
        "model=rnn",
        "model._target_=tests.forks.models.PeekingGRU",
        cwd=tmp_path,
        data_root=data_root,
        env=env,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    visit = browser.open(tmp_path / "run" / PAGE)
    loaded_cleanly(visit, images=0)  # not trained: no curves, no figures
    statuses = rows(visit, "preflight")
    failed = statuses.count("FAIL")
    assert failed >= 1 and statuses[:failed] == ["FAIL"] * failed, statuses  # the FAIL rows first
    first = visit.evaluate("document.querySelector('#preflight tbody tr').textContent")
    assert "causality" in first
    head = visit.evaluate(
        "document.getElementById('verdict').textContent + document.querySelector('.next').textContent"
    )
    assert "PREFLIGHT_FAIL" in head and "causality" in head and "FAIL row" in head
    shot(visit, "run_preflight_fail")


def test_the_page_of_a_run_stopped_by_a_signal(browser, tmp_path, data_root):
    run = tmp_path / "run"
    args = ("mode=full", "mode.max_steps=100000", "mode.val_every=50", f"data.root={data_root}")
    process = start_train(*args, run_dir=run, cwd=tmp_path)
    try:
        wait_for_steps(run / "metrics.csv", 20, process)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM
    assert read_verdict(run)["status"] == "INTERRUPTED"
    visit = browser.open(run / PAGE)
    loaded_cleanly(visit)
    head = visit.evaluate(
        "document.getElementById('verdict').textContent + document.querySelector('.next').textContent"
    )
    assert "stopped by SIGTERM" in head and "ckpt_path=" in head and "last.ckpt" in head
    assert visit.evaluate("document.querySelector('#curves svg.chart polyline') !== null")  # the steps it did
    shot(visit, "run_interrupted")


def test_the_page_of_a_sweep_links_each_job(browser, tmp_path, data_root):
    result = train("-m", "n=1,2,3", "mode.max_steps=40", cwd=tmp_path, data_root=data_root)
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "sweep"
    visit = browser.open(sweep / PAGE)
    loaded_cleanly(visit)
    links = visit.evaluate("[...document.querySelectorAll('#summary a.job')].map(a => a.href)")
    statuses = rows(visit, "summary")
    assert len(links) == 3 and len(statuses) == 3
    shot(visit, "sweep")
    for link, status in zip(links, statuses, strict=True):
        job = browser.open(Path(link.removeprefix("file://")))
        loaded_cleanly(job)
        assert job.evaluate("document.documentElement.dataset.status") == status
    sort = (
        "document.querySelector('#summary th:nth-child(2)').click();"  # sorting keeps every row and its link
    )
    assert sorted(visit_links(browser, sweep, sort)) == sorted(links)


def visit_links(browser, sweep: Path, script: str) -> list[str]:
    visit = browser.open(sweep / PAGE)
    return visit.evaluate(script + "[...document.querySelectorAll('#summary a.job')].map(a => a.href)")
