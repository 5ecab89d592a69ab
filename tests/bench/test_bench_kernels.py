"""The kernels benchmark (benchmarks/perf.py's kernels_main) at a few steps: each variant's count an average step, the probes
adding some, wandb.watch adding more at its period than the probes do at theirs."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("harness.probes", reason="this project has no probes")
from benchmarks import perf as kernels  # noqa: E402 -- it imports the probes


def test_the_counter_counts_every_aten_operation_once():
    counts = kernels.Counter()
    x = torch.ones(3)
    with kernels._Counting(counts):
        (x + 1).mul(2).sum()
    assert counts["ops"] == 3, counts


@pytest.mark.slow  # four 20-step fits of a 12-block model, every operation counted: ~15 s
def test_each_variant_is_counted_a_step_and_the_probes_add_kernels(tmp_path, monkeypatch, one_thread):
    monkeypatch.setattr(kernels, "OUT", tmp_path)
    monkeypatch.setattr(kernels, "STEPS", 20)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    counts = {v: kernels.kernels_a_step(v) for v in ("off", "probes", "probes_watch_period", "wandb_watch")}
    assert 500 < counts["off"] < counts["probes"] < counts["probes_watch_period"], counts
    assert counts["wandb_watch"] > counts["probes_watch_period"], counts  # every tensor, every 10 steps
