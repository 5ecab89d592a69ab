"""Every model check of the preflight catches the bug it claims to catch, planted in TinyLM (tiny_lm_bugs.py):
FAIL with a detail that names the fault (parameter, position, module or key). TinyLM itself passes every check,
so each FAIL comes from the planted bug and nothing else; and the checks share their passes over a batch."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from harness import checks
from harness.checks import FAIL, PASS, WARN
from harness.checks.model.passes import train_pass
from tests.checks.model.tiny_lm_bugs import (
    BATCH,
    CFG,
    MODEL_BUGS,
    TIME,
    VOCAB,
    WIDTH,
    EmitsInf,
    HugeOutputScale,
    IgnoresInput,
    ScalesItsHead,
    SeededDropout,
    TinyLM,
    ZeroInitHead,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


@pytest.fixture
def lm_batch() -> dict:
    """A language-modelling Batch (every position in the loss) of random tokens."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (BATCH, TIME + 1), generator=generator)
    return {
        "input_ids": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "loss_mask": torch.ones(BATCH, TIME, dtype=torch.bool),
    }


def build(model_cls, *args, **kwargs) -> nn.Module:
    torch.manual_seed(0)
    return model_cls(*args, **kwargs)


@pytest.mark.parametrize("check", checks.MODEL_CHECKS, ids=lambda c: c.__name__)
def test_bug_free_baseline_passes(check, lm_batch):
    """The control: without a planted bug, every model check passes on TinyLM."""
    result = check(build(TinyLM, VOCAB), lm_batch, CFG)
    assert result.status == PASS, result


@pytest.mark.parametrize(("model_cls", "check", "named", "not_named"), MODEL_BUGS)
def test_check_catches_planted_model_bug(model_cls, check, named, not_named, lm_batch):
    result = check(build(model_cls, VOCAB), lm_batch, CFG)
    assert result.name == check.__name__
    assert result.status == FAIL, f"{check.__name__} missed the bug of {model_cls.__name__}: {result}"
    for piece in named:
        assert piece in result.detail, f"{piece!r} not named in: {result.detail}"
    for piece in not_named:
        assert piece not in result.detail, f"{piece!r} wrongly named in: {result.detail}"


def test_zero_initialized_output_is_no_blocked_path(lm_batch):
    """The control of zero-gradient: an exactly zero gradient that one optimizer step wakes is by design."""
    model = build(ZeroInitHead, VOCAB)
    grads = train_pass(model, lm_batch, seed=0).grads
    assert not grads["qkv.weight"].any() and not grads["token_embedding.weight"].any(), "no zero gradient"
    result = checks.gradient_flow(model, lm_batch, CFG)
    assert result.status == PASS and "only after one step" in result.detail, result
    assert not model.head.weight.any(), "the step was taken on the model itself, not on a copy"


@pytest.mark.parametrize("check", checks.MODEL_CHECKS, ids=lambda c: c.__name__)
def test_zero_initialized_output_passes_every_check(check, lm_batch):
    """A zero-initialized output head (as some GPT recipes do) makes the logits ignore the input at step 0:
    the checks that compare logits judge the model after one optimizer step instead."""
    result = check(build(ZeroInitHead, VOCAB), lm_batch, CFG)
    assert result.status == PASS, result


def test_frozen_tensor_the_loss_does_not_need_is_a_warning(lm_batch):
    model = build(TinyLM, VOCAB)
    model.qkv.bias.requires_grad_(False)
    result = checks.gradient_flow(model, lm_batch, CFG)
    assert result.status == WARN and "1 frozen" in result.detail and "qkv.bias" in result.detail, result


def test_checks_comparing_two_passes_do_not_blame_a_weight_changed_in_forward(lm_batch):
    """A model that changes its weights in forward is determinism's finding; the leak checks say they
    could not judge instead of reporting a leak."""
    for check in (checks.causality, checks.batch_independence, checks.word_order, checks.input_dependence):
        result = check(build(ScalesItsHead, VOCAB), lm_batch, CFG)
        assert result.status == WARN and "head.weight in place" in result.detail, result


def test_determinism_accepts_randomness_that_seeding_reaches(lm_batch):
    """The control of private-generator: training-mode dropout is random, yet repeatable under a seed."""
    model = build(SeededDropout, VOCAB)
    with torch.no_grad():
        assert not torch.equal(model.train()(lm_batch["input_ids"]), model(lm_batch["input_ids"])), (
            "dropout is off"
        )
    result = checks.determinism(model, lm_batch, CFG)
    assert result.status == PASS, result


def test_measured_init_loss_is_the_real_loss(lm_batch):
    """init_loss reports the losses it measured, not some other numbers: the mean over every class as the
    target (what it judges) and the loss on the batch's own targets."""
    model = build(HugeOutputScale, VOCAB)
    result = checks.init_loss(model, lm_batch, CFG)
    with torch.no_grad():
        logits = model(lm_batch["input_ids"]).flatten(0, 1)
        loss = torch.nn.functional.cross_entropy(logits, lm_batch["targets"].flatten()).item()
        every = (
            torch.stack(
                [
                    torch.nn.functional.cross_entropy(
                        logits, torch.full_like(lm_batch["targets"].flatten(), c)
                    )
                    for c in range(VOCAB)
                ]
            )
            .mean()
            .item()
        )
    assert loss > 3 * math.log(VOCAB)
    assert f"measured {every:.3f} over every target" in result.detail, (every, result.detail)
    assert f"{loss:.3f} on this batch's targets" in result.detail, (loss, result.detail)


def test_init_loss_is_not_fooled_by_which_targets_a_few_positions_hold():
    """Logits of std 0.6 (a common default init) on 4 labelled positions: the loss on those targets
    scatters by ~10% around ln(vocab) + 0.18; the mean over every target stays within 10% of ln(vocab)."""
    generator = torch.Generator().manual_seed(0)
    logits = 0.6 * torch.randn(4, 8, 20, generator=generator)
    mask = torch.zeros(4, 8, dtype=torch.bool)
    mask[:, -1] = True
    targets = logits.argmin(dim=-1)  # the least likely class: the worst case for the batch's own loss

    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.token_embedding = nn.Embedding(20, 1)

        def forward(self, input_ids):
            return logits + 0 * self.token_embedding(input_ids)

    batch = {"input_ids": torch.zeros(4, 8, dtype=torch.long), "targets": targets, "loss_mask": mask}
    result = checks.init_loss(Fixed(), batch, CFG)
    on_targets = torch.nn.functional.cross_entropy(logits[:, -1], targets[:, -1]).item()
    assert on_targets > 1.1 * math.log(20), on_targets  # the old judgement would have warned
    assert result.status == PASS, result


def test_checks_leave_the_model_as_they_found_it(lm_batch):
    """A check restores train/eval mode and leaves no gradients behind (the preflight runs before training)."""
    model = build(TinyLM, VOCAB).eval()
    for check in checks.MODEL_CHECKS:
        check(model, lm_batch, CFG)
        assert not model.training, check.__name__
        assert all(p.grad is None for p in model.parameters()), check.__name__


# ---------------------------------------------------------------------------------------------------------
# 1d. edge cases the checks once missed
# ---------------------------------------------------------------------------------------------------------


def test_model_that_ignores_its_input_is_no_leak(lm_batch):
    """Nothing moves: the leak checks cannot judge and say so (a WARN pointing at input_dependence, which
    FAILs)."""
    model = build(IgnoresInput, VOCAB)
    for check in (checks.causality, checks.batch_independence):
        result = check(model, lm_batch, CFG)
        assert result.status == WARN and "input_dependence" in result.detail, result


class CountsCalls(TinyLM):
    """TinyLM, counting its forward passes."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.calls = 0

    def forward(self, input_ids):
        self.calls += 1
        return super().forward(input_ids)


def test_checks_share_their_passes_over_a_sample_batch(lm_batch):
    """On the preflight's batch (a SampleBatch) the seeded train-mode pass and the eval pass run once for all
    the checks that read them: fewer forward passes than on a plain dict, where each check runs its own."""
    counts = {}
    for kind, batch in (("plain", dict(lm_batch)), ("sample", checks.result.SampleBatch(lm_batch))):
        model = build(CountsCalls, VOCAB)
        results = [check(model, batch, CFG) for check in checks.MODEL_CHECKS]
        assert all(r.status == PASS for r in results), results
        counts[kind] = model.calls
    # gradient_flow, determinism, finite, the four leak checks and the three architecture checks (which read the
    # output head off it) share one train pass; init_loss and global_rng one eval pass; residual,
    # attention_scale and stable_log_probs one watched eval pass
    assert counts["plain"] - counts["sample"] == 12, counts


def test_a_sample_batch_never_serves_one_model_the_passes_of_another(lm_batch):
    batch = checks.result.SampleBatch(lm_batch)
    assert checks.finite(build(TinyLM, VOCAB), batch, CFG).status == PASS
    assert checks.finite(build(EmitsInf, VOCAB), batch, CFG).status == FAIL
