"""The speed's cost benchmark (benchmarks/perf.py) run end to end at a tiny size: both figures measured and written
(no timing asserted)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("harness.probes", reason="this project has no probes")  # its Bench is the probes' one
from benchmarks import perf  # noqa: E402 -- it imports the probes


def test_the_cost_benchmark_measures_both_figures(tmp_path, monkeypatch, one_thread):
    monkeypatch.chdir(tmp_path)  # outputs/bench/ under the test's folder
    figures = perf.main(reps=1, inner=20, kernels=False)
    assert set(figures) == {"perf", "perf_hooks"}, figures
    ratio, met, (low, high, reps) = figures["perf"]
    assert (
        0.2 < low <= ratio <= high < 5
        and reps == 1
        and met == (ratio <= perf.TARGET and figures["perf_hooks"][1])
    )
    hooks, _ = figures["perf_hooks"]
    assert 1 < hooks < 1.5, hooks  # the Speed's own hooks take some time, and a small share of a step
    written = json.loads((tmp_path / "outputs" / "bench" / "perf.json").read_text())
    assert written == {perf.MODEL: {"perf": ratio, "perf_hooks": hooks}}
