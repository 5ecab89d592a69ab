"""Planted bugs in real LLM code: each realistic bug, planted alone in MiniGPT or a Hugging Face model, is stopped
by the check meant for it (FAIL; WARN for a frozen non-essential tensor), and the detail names the module or
parameter at fault; each bug is one change to its correct model."""

from __future__ import annotations

import pytest
import torch

from harness import checks
from harness.checks import FAIL, PASS, WARN
from tests.checks.real_models.conftest import CFG, CORRECT, build, hf_bug, minigpt, run_check
from tests.forks import real_models as rm

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


# ---------------------------------------------------------------------------------------------------------
# 2. planted bugs in real models
# ---------------------------------------------------------------------------------------------------------


#: (model builder, check, status, strings the detail must contain, strings it must not contain)
BUGS = [
    pytest.param(
        hf_bug(rm.RollInputs, "llama"),
        "causality",
        FAIL,
        ["input_ids"],  # the leak is in forward's own code, before any module
        ["layers.0.self_attn", "layers.1.self_attn"],
        id="hf-llama-rolls-input_ids-by-one",
    ),
    pytest.param(
        hf_bug(rm.SecondEmbedding, "gpt2"),
        "causality",
        FAIL,
        ["next_embedding"],
        ["transformer.h."],
        id="hf-gpt2-second-embedding-of-the-next-token",
    ),
    pytest.param(
        hf_bug(rm.BatchRollInputs, "llama"),
        "batch_independence",
        FAIL,
        ["input_ids"],
        ["layers.0.self_attn", "layers.1.self_attn"],
        id="hf-llama-input_ids-mixed-across-the-batch",
    ),
    pytest.param(
        rm.frozen_head,
        "gradient_flow",
        FAIL,
        ["frozen", "lm.lm_head.weight"],
        [],
        id="hf-llama-frozen-lm_head",
    ),
    pytest.param(
        rm.frozen_tied_head,
        "gradient_flow",
        FAIL,
        ["frozen", "lm.transformer.wte.weight (the token embedding and the output head)"],
        [],
        id="hf-gpt2-frozen-tied-head",
    ),
    pytest.param(
        rm.frozen_embedding,
        "gradient_flow",
        FAIL,
        ["frozen", "lm.model.embed_tokens.weight"],
        ["lm.lm_head"],
        id="hf-llama-frozen-token-embedding",
    ),
    pytest.param(
        rm.frozen_norm,
        "gradient_flow",
        WARN,  # suspicious, not fatal: the model can still learn
        [rm.FROZEN_NORM],
        ["lm.lm_head", "embed_tokens"],
        id="hf-llama-frozen-rmsnorm-gain-warns",
    ),
    pytest.param(
        minigpt(rm.BlockedMLP),
        "gradient_flow",
        FAIL,
        ["blocks.0.mlp."],
        ["attn."],
        id="minigpt-mlp-branch-times-zero",
    ),
    pytest.param(
        minigpt(rm.SoftmaxWrongAxis),
        "causality",
        FAIL,
        ["blocks.0.attn"],
        ["input_ids"],
        id="minigpt-softmax-over-queries",
    ),
    pytest.param(
        minigpt(rm.HeadsNoTranspose),
        "causality",
        FAIL,
        ["blocks.0.attn"],
        ["input_ids"],
        id="minigpt-head-split-without-transpose",
    ),
    pytest.param(
        minigpt(rm.MergeHeadsNoTranspose),
        "causality",
        FAIL,
        ["blocks.0.attn"],
        ["input_ids"],
        id="minigpt-head-merge-without-transpose",
    ),
    pytest.param(
        minigpt(rm.WeightChangedInForward),
        "determinism",
        FAIL,
        ["in place", "head.weight"],
        [],
        id="minigpt-forward-decays-a-weight-in-place",
    ),
    pytest.param(
        minigpt(rm.ConsumesRNG),
        "global_rng",
        FAIL,
        ["RNG"],
        [],
        id="minigpt-eval-forward-draws-random-numbers",
    ),
    pytest.param(minigpt(rm.Reseeds), "global_rng", FAIL, ["RNG"], [], id="minigpt-forward-reseeds-torch"),
    pytest.param(
        minigpt(rm.AttentionScaledUp, d_model=256),
        "attention_scale",
        FAIL,
        ["blocks.0.attn", "nearly one-hot", "sqrt(head_dim)"],
        [],
        id="minigpt-attention-scores-times-sqrt-d",
    ),
    pytest.param(
        rm.attention_scaled_up,
        "attention_scale",
        FAIL,
        ["lm.model.layers.0.self_attn", "nearly one-hot"],
        [],
        id="hf-llama-attention-scaled-up",
    ),
    pytest.param(
        lambda vocab, length: rm.attention_scaled_up(vocab, length, "gpt2"),
        "attention_scale",
        FAIL,
        ["lm.transformer.h.0.attn", "nearly one-hot"],
        [],
        id="hf-gpt2-attention-scaled-up",
    ),
    pytest.param(
        minigpt(rm.AttentionScaledUp),
        "attention_scale",
        FAIL,
        ["blocks.0.attn", "scale q·kᵀ by 2.83", "multiplied by sqrt(head_dim) where it should be divided"],
        [],
        id="minigpt-attention-times-sqrt-d-at-its-own-size",
    ),
    pytest.param(
        lambda vocab, length: rm.attention_scaled_up(vocab, length, "llama", d_model=32),
        "attention_scale",
        FAIL,
        ["lm.model.layers.0.self_attn", "multiplied by sqrt(head_dim) where it should be divided"],
        [],
        id="hf-llama-scaling-inverted-at-its-own-size",
    ),
    pytest.param(
        minigpt(rm.AttentionUnscaled),
        "attention_scale",
        FAIL,
        ["blocks.0.attn", "not scaled at all"],
        [],
        id="minigpt-attention-unscaled",
    ),
    pytest.param(
        minigpt(rm.AttentionUnscaledFiniteMask),
        "attention_scale",
        FAIL,
        ["blocks.0.attn", "not scaled at all"],
        [],
        id="minigpt-attention-unscaled-behind-a-finite-mask",
    ),
    pytest.param(
        minigpt(rm.AttentionScaledTwice),
        "attention_scale",
        WARN,
        ["blocks.0.attn", "scaled twice", "attention_scale"],
        [],
        id="minigpt-attention-scaled-twice",
    ),
    pytest.param(
        minigpt(rm.NoAttentionResidual),
        "residual",
        FAIL,
        ["blocks.0, blocks.1 do not pass their input on", "x = x + f(x)"],
        [],
        id="minigpt-attention-residual-dropped",
    ),
    pytest.param(
        rm.llama_without_attention_residual,
        "residual",
        FAIL,
        ["lm.model.layers.0, lm.model.layers.1 do not pass their input on"],
        [],
        id="hf-llama-attention-residual-dropped",
    ),
    pytest.param(
        rm.x_decoder_without_residual,
        "residual",
        FAIL,
        ["net.attn_layers.layers.0, net.attn_layers.layers.1", "do not pass their input on"],
        [],
        id="x-transformers-residual-dropped",
    ),
    pytest.param(
        minigpt(rm.LogOfSoftmax),
        "stable_log_probs",
        FAIL,
        ["'head'", "-inf or NaN", "log(softmax(x))"],
        [],
        id="minigpt-returns-log-of-softmax",
    ),
    pytest.param(
        minigpt(rm.HandMadeLogSoftmax),
        "stable_log_probs",
        FAIL,
        ["'head'", "-inf or NaN", "without subtracting the max"],
        [],
        id="minigpt-log-sum-exp-without-the-max",
    ),
    pytest.param(
        hf_bug(rm.HFLogOfSoftmax, "llama"),
        "stable_log_probs",
        FAIL,
        ["'lm.lm_head'", "-inf or NaN"],
        [],
        id="hf-llama-returns-log-of-softmax",
    ),
    pytest.param(
        minigpt(rm.NoPositions1Layer),
        "word_order",
        FAIL,
        ["word order"],
        [],
        id="minigpt-1-layer-no-positions",
    ),
]


#: other checks a bug may also rightly FAIL (by its id); any other row must not FAIL: it would misdirect
ALSO_MAY_FAIL = {
    "minigpt-head-split-without-transpose": {"batch_independence"},
    "minigpt-head-merge-without-transpose": {"batch_independence"},
}


@pytest.mark.parametrize(("make", "check", "status", "named", "not_named"), BUGS)
def test_planted_bug_is_stopped(make, check, status, named, not_named, synthetic, request):
    """The check meant for the bug gives `status` and names the fault; run on one model as the preflight
    runs them, no other check FAILs (one may WARN that it cannot judge)."""
    model = build(make, synthetic)
    batch = checks.sample_batch(synthetic.train_dataset, 4)
    result = run_check(check, model, batch)
    assert result.name == check, result
    assert result.status == status, result
    for name in named:
        assert name in result.detail, f"{name!r} not in the detail: {result.detail}"
    for name in not_named:
        assert name not in result.detail, f"{name!r} wrongly blamed: {result.detail}"
    model = build(make, synthetic)
    allowed = {check} | ALSO_MAY_FAIL.get(request.node.callspec.id, set())
    others = [other(model, batch, CFG) for other in checks.MODEL_CHECKS]
    misdirected = [f"{r.name}: {r.detail}" for r in others if r.status == FAIL and r.name not in allowed]
    assert not misdirected, "other rows FAIL too:\n" + "\n".join(misdirected)


@pytest.mark.parametrize(
    ("make", "read"),
    [
        (minigpt(rm.AttentionQueryPrescaled), "by 1/sqrt(head_dim), or as declared, in blocks.0.attn"),
        (minigpt(rm.AttentionDeclaredTemperature), "by 1/sqrt(head_dim), or as declared, in blocks.0.attn"),
        (CORRECT["x-transformers-qk-norm"], "by a temperature on normalized q and k in"),
        (
            lambda vocab, length: rm.XDecoder(vocab, max_len=length, attn_qk_norm=True, attn_dim_head=length),
            "by a temperature on normalized q and k in",
        ),
        (
            minigpt(rm.with_attention(rm.QueryScaledBeforeRotary), positions="rope"),
            "by 1/sqrt(head_dim), or as declared, in blocks.0.attn",
        ),
        (minigpt(rm.with_attention(rm.QueryScaledInPlaceOnFusedView)), "or as declared, in blocks.0.attn"),
        (minigpt(rm.with_attention(rm.ScoresScaledInPlace)), "or as declared, in blocks.0.attn"),
        (minigpt(rm.with_attention(rm.FiniteMaskFill)), "or as declared, in blocks.0.attn"),
        (minigpt(rm.with_attention(rm.ScoresBySum)), "the factor applied to q·kᵀ was not read"),
    ],
    ids=[
        "query-scaled-in-place-first",
        "declared-temperature",
        "qk-norm",
        "qk-norm-head-width-equal-to-length",
        "query-scaled-before-rotary",
        "query-scaled-in-place-on-a-fused-view",
        "scores-scaled-in-place",
        "mask-filled-with-minus-1e9",
        "scores-summed-not-read",
    ],
)
def test_attention_scale_reads_the_factor_wherever_the_code_applies_it(make, read, synthetic):
    """The factor is read from what the code computes: on the queries before their product (a view of them in
    the product carries it), declared by the module, or a temperature over normalized queries and keys."""
    model = build(make, synthetic)
    result = run_check("attention_scale", model, checks.sample_batch(synthetic.train_dataset, 4))
    assert result.status == PASS and read in result.detail, result


def test_planted_bugs_are_each_one_change(synthetic):
    """Each MiniGPT bug is MiniGPT with one class or method swapped: the same parameters, same names and shapes,
    and before its bug takes effect the same output (so the control, MiniGPT passing, holds for it)."""
    base = build(minigpt(rm.MiniGPT), synthetic)
    shapes = {n: p.shape for n, p in base.named_parameters()}
    for cls in (
        rm.BlockedMLP,
        rm.SoftmaxWrongAxis,
        rm.HeadsNoTranspose,
        rm.MergeHeadsNoTranspose,
        rm.WeightChangedInForward,
        rm.ConsumesRNG,
        rm.Reseeds,
        rm.AttentionScaledUp,
        rm.TrainOnlyPositions,
        rm.NoAttentionResidual,
        rm.LogOfSoftmax,
        rm.HandMadeLogSoftmax,
    ):
        bug = build(minigpt(cls), synthetic)
        assert {n: p.shape for n, p in bug.named_parameters()} == shapes, cls.__name__
        assert all(torch.equal(p, base.get_parameter(n)) for n, p in bug.named_parameters()), cls.__name__
        assert cls.__doc__ and "BUG" in cls.__doc__, cls.__name__
