"""The loss is one component (conf/loss/, harness.ops.loss): training, the preflight, the probes and mode=eval all
take the one the config names; the built-in choices behave as their names say."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from harness.ops.loss import CrossEntropy, LabelSmoothing, ZLoss, loss_of
from harness.report.verdict import read_verdict
from tests.conftest import ROOT, run_command


@pytest.mark.slow  # a training run and an eval run, ~15 s
def test_a_forks_loss_given_by_config_reaches_every_part(run_train, tmp_path, data_root):
    """A fork's own loss named by loss._target_ is the one training, every preflight check, the probes and eval use."""
    notes = tmp_path / "notes.txt"
    loss = ["loss._target_=tests.forks.losses.Noted", f"+loss.notes={notes}"]
    trained = run_train("n=1", "data.length=8", "mode.max_steps=30", "probes.datapoints.every=5", *loss)
    assert trained.returncode in (0, 1), trained.stderr[-2000:]
    evaluated = run_command(
        sys.executable,
        str(ROOT / "eval.py"),
        f"ckpt_path={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}",
        f"hydra.run.dir={tmp_path / 'eval'}",
        f"data.root={data_root}",
        cwd=tmp_path,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert read_verdict(tmp_path / "eval")["mode"] == "eval"
    callers = {line.split()[1] for line in notes.read_text().splitlines()}
    parts = {line.split()[0] for line in notes.read_text().splitlines()}
    assert parts == {"training", "preflight", "probes", "eval"}, callers
    assert {
        "harness.train.module",
        "harness.probes.tokens.datapoints",
        "harness.probes.tokens.reach",
    } <= callers, callers
    assert any(c.startswith("harness.checks.") for c in callers), callers


def test_no_cross_entropy_is_computed_outside_the_loss_component():
    """Every cross entropy of the package is harness.ops.loss's: a fork that changes the loss changes it everywhere."""
    found = []
    for path in (ROOT / "src" / "harness").rglob("*.py"):
        if path.name == "loss.py" and path.parent.name == "ops":
            continue
        text = path.read_text()
        found += [
            f"{path.relative_to(ROOT)}: {word}"
            for word in ("cross_entropy(", "log_softmax(", "nll_loss(")
            if word in text
        ]
    assert not found, found


def logits_and_batch(seed: int = 0, vocab: int = 11):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, vocab, generator=generator) * 2
    targets = torch.randint(0, vocab, (3, 5), generator=generator)
    mask = torch.rand(3, 5, generator=generator) < 0.7
    mask[0, 0] = True
    return logits, targets, mask


def test_cross_entropy_is_the_mean_negative_log_probability_over_the_mask():
    logits, targets, mask = logits_and_batch()
    by_hand = -torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0][mask].mean()
    for vectorize in (True, False):
        assert torch.allclose(CrossEntropy(vectorize)(logits, targets, mask), by_hand, atol=1e-6)
    per_example = CrossEntropy().per_example(logits, targets, mask)
    assert torch.allclose(
        per_example[0],
        -torch.log_softmax(logits[0], -1).gather(-1, targets[0][:, None])[:, 0][mask[0]].mean(),
    )


def test_label_smoothing_mixes_the_target_with_a_uniform_one():
    logits, targets, mask = logits_and_batch()
    s = 0.2
    log_p = torch.log_softmax(logits, dim=-1)
    smoothed = (1 - s) * -log_p.gather(-1, targets[..., None])[..., 0] + s * -log_p.mean(dim=-1)
    assert torch.allclose(LabelSmoothing(s)(logits, targets, mask), smoothed[mask].mean(), atol=1e-5)
    uniform = torch.zeros(
        1, 1, 7
    )  # at a uniform prediction every smoothing gives ln(vocab), as cross entropy does
    assert LabelSmoothing(0.3)(
        uniform, torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.bool)
    ).item() == pytest.approx(math.log(7))


def test_z_loss_adds_the_squared_log_normalizer():
    logits, targets, mask = logits_and_batch()
    lse = logits.logsumexp(dim=-1)
    expected = CrossEntropy()(logits, targets, mask) + 0.5 * lse.square()[mask].mean()
    assert torch.allclose(ZLoss(0.5)(logits, targets, mask), expected, atol=1e-5)


def test_the_config_names_the_loss_and_vectorize_follows_the_model():
    from omegaconf import OmegaConf

    assert isinstance(loss_of(None), CrossEntropy) and isinstance(loss_of({"seed": 0}), CrossEntropy)
    cfg = OmegaConf.create(
        {"loss": {"_target_": "harness.ops.loss.ZLoss", "weight": 0.1}, "model": {"vectorize": False}}
    )
    built = loss_of(cfg)
    assert isinstance(built, ZLoss) and built.weight == 0.1 and built.vectorize is False
