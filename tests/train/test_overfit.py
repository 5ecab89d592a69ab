"""Overfit mode: every built-in model memorizes 1, 2 and 5 examples of both data sources; the floor; re-seeding."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from harness.data.sources.synthetic import generate
from harness.tasks.training import run
from harness.train.overfit import achievable_floor, eval_gap
from tests.conftest import PROBES_OFF


@pytest.mark.parametrize("data", ["synthetic", "text"])
@pytest.mark.parametrize("model", ["transformer", "rnn", "lstm"])
@pytest.mark.parametrize(
    "n", [1, *(pytest.param(n, marks=pytest.mark.slow) for n in (2, 5))]
)  # 2, 5: test-slow
def test_built_in_models_memorize(n, model, data, make_config):
    verdict = run(
        make_config(
            f"model={model}", f"data={data}", f"n={n}", "data.length=32", "preflight=false", *PROBES_OFF
        )
    )
    assert verdict["status"] == "PASS", verdict
    assert verdict["steps"] < 1000


def test_floor_counts_contexts_that_cannot_be_told_apart():
    ids = torch.tensor([[1, 2], [1, 2], [1, 3]])
    batch = {
        "input_ids": ids,
        "targets": torch.tensor([[0, 5], [0, 6], [0, 5]]),
        "loss_mask": torch.tensor([[False, True]] * 3),
    }
    # contexts (1,2) twice with targets 5 and 6: ln 2 each; (1,3) once: 0
    assert achievable_floor(batch) == pytest.approx(2 * math.log(2) / 3)
    batch["loss_mask"] = torch.ones(3, 2, dtype=torch.bool)
    # position 0: context (1,) three times with target 0 -> 0 loss; position 1 as above
    assert achievable_floor(batch) == pytest.approx(2 * math.log(2) / 6)


def test_duplicate_contexts_with_different_labels_still_pass(make_config):
    # a one-token alphabet: all 5 inputs are the same, their random labels are not (for this seed)
    seed = next(
        s for s in range(100) if len({r["label"] for r in generate(1, 5, "random", "a", "xy", s)}) == 2
    )
    verdict = run(
        make_config(
            "n=5",
            "data.length=1",
            "data.alphabet=a",
            "data.labels=xy",
            f"data.seed={seed}",
            "data.size=5",
            "model=rnn",
            "preflight=false",
        )
    )
    assert verdict["floor"] > 0.1 and verdict["status"] == "PASS", verdict


def _train_losses(run_dir) -> list[float]:
    with open(run_dir / "metrics.csv") as f:
        return [float(row["train/loss"]) for row in csv.DictReader(f) if row.get("train/loss")]


@pytest.mark.parametrize("reseed", [True, False])
def test_reseeding_makes_every_step_identical(reseed, make_config, tmp_path):
    # no learning (lr=0) and heavy dropout: only the dropout masks can change the loss from step to step
    cfg = make_config(
        "model.dropout=0.5",
        "optim.lr=0",
        "mode.max_steps=5",
        f"mode.reseed={str(reseed).lower()}",
        "preflight=false",
    )
    run(cfg)
    losses = _train_losses(tmp_path / "run")
    assert len(losses) == 5
    assert (len(set(losses)) == 1) == reseed, losses


def test_full_mode_checkpoints_and_resumes(make_config, tmp_path):
    first = run(
        make_config(
            "mode=full",
            "mode.max_steps=20",
            "mode.val_every=10",
            "mode.ckpt_every=10",
            "data.size=64",
            "data.batch_size=8",
            "preflight=false",
            run_dir=tmp_path / "first",
        )
    )
    checkpoints = tmp_path / "first" / "checkpoints"
    assert first["status"] == "DONE" and first["steps"] == 20
    assert (checkpoints / "last.ckpt").exists() and (checkpoints / "best.ckpt").exists()
    resumed = run(
        make_config(
            "mode=full",
            "mode.max_steps=30",
            "mode.val_every=10",
            "data.size=64",
            "data.batch_size=8",
            "preflight=false",
            f"ckpt_path={checkpoints / 'last.ckpt'}",
            run_dir=tmp_path / "second",
        )
    )
    assert resumed["steps"] == 30


@pytest.mark.slow
def test_whole_model_runs_on_loop_versions(make_config, caplog):
    """model.vectorize=false switches every twin the run uses to its loop version, with a warning each."""
    verdict = run(make_config("model.vectorize=false", "n=1", "data.length=6", "preflight=false"))
    assert verdict["status"] == "PASS", verdict
    warned = {r.getMessage().split()[0] for r in caplog.records if "loop version" in r.getMessage()}
    assert {"CausalAttention", "MaskedCrossEntropy"} <= warned, warned


def test_a_run_that_reaches_its_target_between_logging_steps_stops_at_the_next(make_config, tmp_path):
    """log_every=5: each step's loss is read with the other values of the next logging step (one copy to the host
    there, none between), so a run that reaches the target between two stops at the next, whose row holds that
    step's loss."""
    verdict = run(make_config("n=2", *PROBES_OFF, "preflight=false", "mode.log_every=5"))
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    assert verdict["status"] == "PASS" and verdict["steps"] % 5 == 0, verdict
    assert [int(r["step"]) for r in rows] == list(range(4, verdict["steps"], 5))
    assert float(rows[-1]["train/loss"]) == pytest.approx(verdict["final_loss"]), rows[-1]
    reached = [float(r["train/loss"]) <= verdict["floor"] + 0.02 for r in rows]
    assert reached[-1] and not any(reached[:-1]), rows  # the target's step lies in the last five


# the eval-mode gap: what dropout explains is no warning; what it does not, and dropout far too high, are


def test_eval_gap_leaves_what_usual_dropout_does_alone():
    """Re-seeded dropout memorizes through one mask, so eval mode scores worse on any correct model with
    dropout: train mode with dropout off scores as eval mode does, and a usual rate is no warning."""
    train, evaluated = {"acc": 1.0, "loss": 0.015}, {"acc": 0.6, "loss": 0.68}
    assert eval_gap(train, evaluated, plain=dict(evaluated), dropout=0.2) is None
    assert eval_gap(train, evaluated, plain=dict(evaluated), dropout=0.3) is None
    assert eval_gap(train, {"acc": 1.0, "loss": 0.9}, plain={"acc": 1.0, "loss": 0.9}, dropout=0.6) is None
    too_high = eval_gap(train, evaluated, plain=dict(evaluated), dropout=0.6)
    assert "dropout 0.6 is far above the usual" in too_high and "0.60" in too_high, too_high
    other = eval_gap(train, evaluated, plain={"acc": 1.0, "loss": 0.02}, dropout=0.2)
    assert "with every dropout off" in other and "self.training" in other and "1.00" in other, other


@pytest.mark.slow  # ~10 s: a GPT-2 overfit run
def test_a_correct_gpt2_with_dropout_0_2_memorizes_without_an_eval_gap(make_config):
    """The case that used to warn: eval mode's loss is many times train mode's (dropout re-seeded), its
    accuracy intact."""
    verdict = run(
        make_config(
            "model=hf",
            "model.arch=gpt2",
            "model.dropout=0.2",
            "model.d_model=32",
            "n=2",
            "data.length=16",
            "preflight=false",
            *PROBES_OFF,
        )
    )
    assert verdict["status"] == "PASS" and verdict["eval_accuracy"] == 1.0, verdict
    assert verdict["eval_loss"] > 3 * verdict["final_loss"], verdict  # what the old rule read as a failure
    assert verdict["eval_gap"] is None, verdict["eval_gap"]


@pytest.mark.slow  # ~5 s: an overfit run on text
def test_a_branch_that_runs_only_in_training_is_the_eval_gap_named(make_config):
    verdict = run(
        make_config(
            "model=transformer",
            "model._target_=tests.forks.real_models.minigpt_bugs.TrainOnlyPositions",
            "model.dropout=0.1",
            "data=text",
            "n=1",
            "data.length=16",
            "model.d_model=32",
            "preflight=false",
            *PROBES_OFF,
        )
    )
    assert verdict["status"] == "PASS" and verdict["eval_accuracy"] < 0.9, verdict
    assert "something other than dropout" in (verdict["eval_gap"] or ""), verdict["eval_gap"]


def test_dropout_far_too_high_is_the_eval_gap_named(make_config):
    verdict = run(
        make_config(
            "model=transformer",
            "model._target_=tests.forks.real_models.minigpt.MiniGPT",
            "model.dropout=0.6",
            "n=2",
            "data.length=16",
            "model.d_model=32",
            "preflight=false",
            *PROBES_OFF,
        )
    )
    assert verdict["status"] == "PASS" and verdict["eval_accuracy"] <= 0.5, verdict
    assert "dropout 0.6 is far above" in (verdict["eval_gap"] or ""), verdict["eval_gap"]
