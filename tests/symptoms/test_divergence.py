"""Divergence, a loss that climbs and stays up: named from every step's loss in a real run at a learning rate far
too high, silent on healthy runs; the rule on planted loss curves; and the detectors that judge consecutive steps
saying so when their signal comes further apart."""

from __future__ import annotations

import csv
import logging
import math
import random
import re

import pytest
import torch

from harness.config import build
from harness.errors import ConfigError
from tests.conftest import needs_probes
from tests.symptoms.conftest import _run, found, names

pytest.importorskip("harness.probes", reason="this project has no probes")  # a fork may delete them
from harness.probes import ProbeSet  # noqa: E402
from harness.probes.detectors import Symptoms  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_thread"), needs_probes]


def _judged(losses: list[float], **limits) -> list:
    """The symptoms a Symptoms probe names from `losses`, one a step, read ten at a time as a run reads them."""
    probe = Symptoms(**limits)
    ProbeSet([probe])  # binds it to a sink of its own
    for end in range(9, len(losses), 10):
        probe.pending_losses = [torch.tensor(v) for v in losses[end - 9 : end + 1]]
        probe.read_losses(end, kept=True)
    return probe.sink.symptoms


def _noisy(level: float, steps: int, seed: int) -> list[float]:
    """A flat LM loss: 5% batch-to-batch noise and a 3x outlier one step in a hundred."""
    draw = random.Random(seed)
    return [level * (1 + 0.05 * draw.gauss(0, 1)) * (3 if draw.random() < 0.01 else 1) for _ in range(steps)]


# the rule on planted curves


def test_a_loss_that_falls_then_climbs_is_divergence_named_where_the_climb_starts():
    fall = [4.0 - 1.5 * i / 60 for i in range(60)]
    losses = [
        v * n for v, n in zip(fall + [2.5 * 1.05**k for k in range(100)], _noisy(1, 160, 0), strict=True)
    ]
    [symptom] = [s for s in _judged(losses) if s.name == "divergence"]
    # 2.5 * 1.05**k passes 2.5 + 0.5 * 4 at k = 12; the running median of 20 steps, 10 steps later
    assert symptom.where == "train/loss" and 75 <= symptom.step <= 90, symptom
    assert symptom.value > 4.5 and re.search(
        r"from its lowest 2\.\d+ to \d+\.\d+ \(initial loss 3\.\d+\)", symptom.detail
    )
    assert "optim.lr" in symptom.suggestion


def test_a_noisy_flat_loss_is_no_divergence():
    for seed in range(5):
        judged = _judged(_noisy(3.0, 3000, seed))
        assert "divergence" not in {s.name for s in judged}, (seed, judged)


def test_a_loss_falling_to_zero_and_wobbling_there_is_no_divergence():
    """Memorizing: the loss near zero jumps by orders of magnitude from step to step, far above its lowest; the
    rule measures the climb in parts of the initial loss, so only a lower threshold names the wobble."""
    draw = random.Random(1)
    losses = [4.0 * math.exp(-i / 30) + 0.03 * draw.random() ** 3 for i in range(600)]
    assert "divergence" not in {s.name for s in _judged(losses)}
    assert "divergence" in {s.name for s in _judged(losses, diverge_rise=1e-3)}, "the wobble is there to see"


@pytest.mark.parametrize(("stays", "diverges"), [(9, False), (40, True)])
def test_a_spike_that_recovers_is_a_loss_spike_and_one_that_stays_up_diverges(stays, diverges):
    losses = _noisy(2.0, 400, 2)
    losses[200 : 200 + stays] = [40.0] * stays
    judged = {s.name: s for s in _judged(losses)}
    assert "loss_spike" in judged, judged  # the spike is there: the other rule names it
    assert ("divergence" in judged) == diverges, judged
    if diverges:  # the running median passes the spike's level once half its 20 steps are the spike's
        assert 205 <= judged["divergence"].step <= 215, judged["divergence"]


@pytest.mark.parametrize("override", ["probes.symptoms.diverge_rise=0", "probes.symptoms.diverge_stay=0"])
def test_a_bad_divergence_threshold_is_a_config_error_naming_its_key(make_config, tmp_path, override):
    key = override.split("=")[0].replace(".", r"\.")
    with pytest.raises(ConfigError, match=f"{key}=0"):
        build(make_config(override).probes, "probes", run_dir=tmp_path, data=None, overfit=True)


# real runs: a learning rate 1000x the default diverges; healthy runs do not


def test_a_learning_rate_far_too_high_in_mode_full_diverges(tmp_path_factory, data_root):
    """optim.lr=3.0: the loss climbs from 3 to tens within 50 steps, warmup and all; update_ratio stays below its
    threshold (Adam's steps are lr-sized, the weights grow with them) and the loss says it first."""
    _, verdict = _run(
        tmp_path_factory, data_root, "diverge", "mode=full", "optim.lr=3.0", "mode.max_steps=50"
    )
    [symptom] = found(verdict, "divergence")
    assert symptom["where"] == "train/loss" and symptom["step"] < 30 and symptom["value"] > 2 * 3, symptom
    assert verdict["status"] == "DONE", verdict["status"]


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(["mode=full", "mode.max_steps=300"], marks=pytest.mark.slow),  # ~5 s
        ["n=5", "mode.target_loss=0", "mode.max_steps=200"],  # memorized, then kept near 0
    ],
    ids=["full", "overfit"],
)
def test_healthy_runs_do_not_diverge(tmp_path_factory, data_root, overrides):
    """At the default learning rate; every built-in model and data source: test_no_false_alarm.py."""
    run_dir, verdict = _run(tmp_path_factory, data_root, "healthy", *overrides)
    assert "divergence" not in names(verdict), verdict["symptoms"]
    with open(run_dir / "metrics.csv") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    assert min(losses) < (1.5 if "mode=full" in overrides else 1e-3), (
        "the loss fell: there was a lowest to climb from"
    )


# the detectors that judge consecutive steps


def test_exploding_gradients_says_so_when_the_gradient_norms_come_further_apart(
    tmp_path_factory, data_root, caplog
):
    """Its running median and its `patience` in a row are of steps: read every 5, it warns once, and only then."""
    caplog.set_level(logging.WARNING, logger="harness.probes.detectors")
    for every, warned in ((1, 0), (5, 1)):
        caplog.clear()
        _run(tmp_path_factory, data_root, "period", "mode.max_steps=30", f"probes.norms.every={every}")
        lines = [
            r.getMessage() for r in caplog.records if r.getMessage().startswith("exploding_gradients reads")
        ]
        assert len(lines) == warned, (every, lines)
    assert "every 5 steps (probes.norms.every)" in lines[0], lines
