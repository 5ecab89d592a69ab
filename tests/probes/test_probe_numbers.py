"""The probes' numbers, in one process: each parameter's own gradient norm, the logit probe beside the run's own
metrics, sums of squares and summary statistics that keep their digits, position statistics and the
embedding projection against the same written out."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from harness.errors import ConfigError
from harness.probes import ProbeSet
from harness.probes.layers.histograms import summarize
from harness.probes.layers.norms import ParameterNorms
from harness.probes.tokens.embeddings import project
from harness.probes.tokens.logits import LogitMass
from harness.train.distributed.shard_sums import norms as whole_norms
from harness.train.distributed.shard_sums import square_sums
from harness.train.loggers import build_loggers
from harness.train.module import HarnessModule, position_stats
from harness.train.nonfinite import NonFiniteGuard
from tests.forks.models import UnusedParamRNN
from tests.probes.conftest import NormRecorder, _batches, _by_step, _fit, _rows

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


@pytest.mark.parametrize("guard_first", [True, False], ids=["norms-shared-with-the-guard", "norms-own"])
def test_gradient_norms_are_each_parameters_own(tmp_path, guard_first):
    """The norms probe logs the non-finite guard's gradient norms when the guard ran first, else takes its own:
    either way each logged gradient and weight norm is torch's own norm of that parameter's tensor, a missing
    gradient (frozen, unused) logged as 0 and counted in grad_norm/missing; the weights' every `weight_every`."""
    torch.manual_seed(0)
    module = HarnessModule(UnusedParamRNN(vocab_size=8, d_model=8))
    norms = ParameterNorms(every=1, weight_every=2, ratio_every=None)
    probes, guard, recorder = ProbeSet([norms]), NonFiniteGuard(), NormRecorder()
    callbacks = [guard, probes, recorder] if guard_first else [probes, guard, recorder]
    _fit(module, callbacks, _batches(8, 4), build_loggers(OmegaConf.create({"name": "csv"}), tmp_path))
    rows = _rows(tmp_path)
    assert sorted(recorder.grads) == list(range(4))
    for step, expected in recorder.grads.items():
        logged = {name: _by_step(rows, f"grad_norm/{name}")[step] for name in expected}
        assert logged == pytest.approx(expected, rel=1e-6), step
        assert logged["unused"] == 0.0 and logged["head.bias"] == 0.0
        assert all(sorted(_by_step(rows, f"weight_norm/{name}")) == [0, 2] for name in expected)
        if step % 2 == 0:
            weights = {name: _by_step(rows, f"weight_norm/{name}")[step] for name in expected}
            assert weights == pytest.approx(recorder.weights[step], rel=1e-6), step
        assert _by_step(rows, "grad_norm/missing")[step] == 2.0  # `unused` and the frozen head.bias


def test_the_logit_probe_logs_with_the_runs_own_metrics(tmp_path):
    """`every: log` (the default): logit/ on exactly the steps the module writes train/ (every 3rd here), the same
    p(correct) from the same pass over the vocabulary; a period that is neither a number nor `log` is one line."""
    torch.manual_seed(0)
    module = HarnessModule(UnusedParamRNN(vocab_size=8, d_model=8))
    logger = build_loggers(OmegaConf.create({"name": "csv"}), tmp_path)
    _fit(module, [ProbeSet([LogitMass()])], _batches(8, 7), logger, log_every_n_steps=3)
    rows = _rows(tmp_path)
    logged, written = _by_step(rows, "logit/p_correct"), _by_step(rows, "train/p_correct")
    assert 0 < len(logged) < 7 and sorted(logged) == sorted(written), (sorted(logged), sorted(written))
    assert logged == pytest.approx(written, rel=1e-5)
    with pytest.raises(ConfigError, match="every=sometimes"):
        LogitMass(every="sometimes")


def test_sums_of_squares_keep_their_digits_at_an_embeddings_size():
    """torch's CPU norm of a float32 tensor accumulates in float32 lanes (0.5% off at GPT-2's embedding, 38M
    entries): the norms the guard and the probes log, and the histograms' sums of squares, are summed in pieces."""
    torch.manual_seed(0)
    big = torch.randn(1 << 22) + 0.5  # 4M entries, a mean besides the spread
    exact = big.double().square().sum().item()
    sums = square_sums([big, big[:5].reshape(5, 1), torch.zeros(0)])
    assert sums.dtype == torch.float64 and sums[1].item() == pytest.approx(
        big[:5].double().square().sum().item()
    )
    assert sums[0].item() == pytest.approx(exact, rel=1e-6) and sums[2].item() == 0.0
    assert whole_norms([big], shards=False)[0].item() == pytest.approx(math.sqrt(exact), rel=1e-6)
    assert summarize([big], bins=None)[0, 6].item() == pytest.approx(exact, rel=1e-6)  # the sum of squares


def test_position_stats_match_a_softmax_written_out():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7) * torch.tensor([1.0, 4.0, 30.0])[:, None, None]  # calm to confident
    targets = torch.randint(0, 7, (3, 5))
    p_target, entropy, top1, correct = position_stats(logits, targets)
    p = logits.double().softmax(dim=-1)
    assert p_target.double() == pytest.approx(p.gather(-1, targets[..., None])[..., 0], abs=1e-6)
    assert entropy.double() == pytest.approx(-(p * p.clamp_min(1e-300).log()).sum(dim=-1), abs=1e-5)
    assert top1.double() == pytest.approx(p.amax(dim=-1), abs=1e-6)
    assert torch.equal(correct, (logits.argmax(dim=-1) == targets).float())
    # a tie for the top is not a correct prediction: a constant output scores nothing
    flat = position_stats(torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long))
    assert flat[3].sum() == 0 and flat[1] == pytest.approx(torch.full((2, 3), math.log(5)))


@pytest.mark.parametrize("shape", [(50, 8), (6, 12)], ids=["vocab-over-width", "width-over-vocab"])
def test_embedding_projection_is_the_svds_first_two_components(shape):
    """The projection from the small scatter matrix: the coordinates an SVD of the centered matrix gives (up to
    each axis's sign, fixed so that the largest coordinate is positive) and the share of variance of each."""
    torch.manual_seed(0)
    weight = torch.randn(*shape) * torch.linspace(3, 0.5, shape[1])  # distinct variances along the axes
    coords, explained = project(weight)
    centered = weight.double() - weight.double().mean(dim=0)
    _, singular, components = torch.linalg.svd(centered, full_matrices=False)
    expected = centered @ components[:2].T
    largest = expected.gather(0, expected.abs().argmax(dim=0, keepdim=True))
    expected = expected * torch.sign(largest)  # the same sign rule: the largest coordinate positive
    assert coords.double() == pytest.approx(expected, abs=1e-4)
    variance = singular**2
    assert explained.double() == pytest.approx(variance[:2] / variance.sum(), rel=1e-4)


def test_summary_statistics_keep_their_digits_near_one_and_are_exact_for_constants():
    """The std of weights near 1 with a small spread (a trained LayerNorm) is where E[x²] - E[x]² cancels."""
    torch.manual_seed(0)
    tensors = [
        1 + 1e-4 * torch.randn(256),
        torch.ones(64),
        torch.zeros(8),
        torch.randn(300),
        torch.tensor([3.0]),
    ]
    rows = summarize(tensors, bins=16)
    for t, row in zip(tensors, rows, strict=True):
        x = t.double()
        std = x.std().item() if t.numel() > 1 else 0.0
        assert (row[0].item(), row[1].item()) == (t.min().item(), t.max().item())
        # the mean to float32's ~1e-7 of the entries' size (their sum accumulates in float32), or exactly
        assert row[2].item() == pytest.approx(x.mean().item(), rel=1e-7, abs=2e-7 * x.abs().mean().item())
        assert row[3].item() == pytest.approx(std, rel=1e-5) if std else row[3].item() == 0.0
        assert row[4].item() == pytest.approx((t == 0).double().mean().item())
        assert row[7:23].sum().item() == t.numel()  # every entry in a bucket, the top one included
