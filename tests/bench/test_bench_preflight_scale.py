"""The preflight-at-scale benchmark runs end to end at a tiny size and writes its figures (no timing asserted)."""

from __future__ import annotations

import json
import math

import pytest

import benchmarks
from benchmarks import preflight_scale


@pytest.mark.slow  # builds and times a model at two scales: a benchmark's test, in test-slow
def test_preflight_scale_writes_its_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmarks, "OUT", tmp_path)  # write() reads the package's OUT
    result = preflight_scale.main(d_model=32, layers=2, heads=2, length=16, preflight_runs=2, step_reps=2)

    figures = json.loads((tmp_path / "preflight_scale.json").read_text())
    assert set(figures) == {"steps", "memory"}
    for value in figures.values():
        assert isinstance(value, float) and math.isfinite(value) and value > 0
    assert {k: v for k, (v, _) in result.items()} == figures
    assert all(isinstance(met, bool) for _, met in result.values())

    details = json.loads((tmp_path / "preflight_scale.details.json").read_text())
    steps, memory = details["steps"], details["memory"]
    assert len(steps["preflight_s"]) == 2 and all(s > 0 for s in steps["preflight_s"])
    assert [len(block) for block in steps["step_s"]] == [2, 2]
    assert all(s > 0 for block in steps["step_s"] for s in block) and steps["warmup_step_s"] > 0
    for key in ("preflight", "step", "first_step"):
        assert isinstance(memory[f"{key}_peak_bytes"], int) and memory[f"{key}_peak_bytes"] > 0
        assert memory[f"{key}_peak_bytes"] >= memory[f"{key}_start_bytes"] > 0
    assert details["setup"]["d_model"] == 32 and details["setup"]["parameters"] > 0
    assert "gradient_flow" in details["checks_s"]  # every check says how long its test took
    assert isinstance(details["failed_checks"], dict)  # names and details of any FAIL (timed all the same)
    assert not (tmp_path / "results.json").exists()  # only the bench's own main writes the merged table
