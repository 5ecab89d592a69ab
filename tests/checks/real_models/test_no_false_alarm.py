"""No false alarm on real LLM code: on every correct model (GPT-2, Llama, Qwen2, MiniGPT with learned or rotary
positions, the zero-initialized-branch variants, the built-ins, more Hugging Face families), on synthetic and
on text data, every model check PASSes: not WARN, not FAIL."""

from __future__ import annotations

import math

import pytest
import torch

from harness import checks
from harness.checks import PASS
from harness.models import HFCausalLM
from tests.checks.real_models.conftest import CFG, CORRECT, SYNTHETIC_LENGTH, WITH_DROPOUT, build
from tests.forks import real_models as rm

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


def test_minigpt_meets_the_model_contract(synthetic):
    """The baseline every MiniGPT bug is planted in: the contract's shapes and attribute, and it learns."""
    for positions in rm.POSITIONS:
        model = build(lambda v, n, p=positions: rm.MiniGPT(v, max_len=n, positions=p), synthetic)
        assert isinstance(model.token_embedding, torch.nn.Embedding)
        batch = checks.sample_batch(synthetic.train_dataset, 4)
        logits = model(batch["input_ids"])
        assert logits.shape == (4, SYNTHETIC_LENGTH, synthetic.tokenizer.vocab_size), logits.shape
        assert logits.dtype == torch.float32
        # GPT-2 init: the loss at init is close to a uniform guess
        loss = torch.nn.functional.cross_entropy(logits[:, -1], batch["targets"][:, -1])
        assert abs(loss.item() - math.log(synthetic.tokenizer.vocab_size)) < 0.1, loss
    with pytest.raises(ValueError, match="positions"):
        rm.MiniGPT(10, positions="sinusoidal")


@pytest.mark.parametrize("data_name", ["synthetic", "text"])
@pytest.mark.parametrize("model_name", list(CORRECT))
def test_no_false_alarm_on_real_models(model_name, data_name, request):
    """Every model check, run in the preflight's order on one model as the preflight does, PASSes."""
    data = request.getfixturevalue(data_name)
    assert_every_check_passes(build(CORRECT[model_name], data), data, f"{model_name} on {data_name}")


@pytest.mark.parametrize("dropout", [0.1, 0.2])
@pytest.mark.parametrize("model_name", WITH_DROPOUT)
def test_no_false_alarm_with_dropout(model_name, dropout, synthetic):
    """Dropout at a usual rate changes nothing: every check runs in train mode, re-seeded, as a step does."""
    make = CORRECT[model_name]
    model = build(lambda vocab, length: make(vocab, length, dropout), synthetic)
    assert_every_check_passes(model, synthetic, f"{model_name} with dropout {dropout}")


def assert_every_check_passes(model, data, what: str) -> None:
    batch = checks.sample_batch(data.train_dataset, 4)
    results = [check(model, batch, CFG) for check in checks.MODEL_CHECKS]
    assert len(results) == len(checks.MODEL_CHECKS) >= 12
    alarms = [f"{r.name} {r.status}: {r.detail}" for r in results if r.status != PASS]
    assert not alarms, f"{what}:\n" + "\n".join(alarms)


def test_twins_check_says_it_covers_the_harness_twins():
    result = checks.twins()
    assert result.status == PASS and "harness" in result.detail, result


def test_the_zero_init_variants_really_start_with_closed_branches(synthetic):
    """What makes them hard: at init, the inner weights of every branch get an exactly zero gradient."""
    batch = checks.sample_batch(synthetic.train_dataset, 4)
    for name in ("hf-gpt2-zeroed-c_proj", "minigpt-zero-init-residual", "minigpt-layerscale"):
        model = build(CORRECT[name], synthetic)
        logits = model(batch["input_ids"])
        torch.nn.functional.cross_entropy(logits[:, -1], batch["targets"][:, -1]).backward()
        zero = [n for n, p in model.named_parameters() if p.grad is not None and not p.grad.any()]
        assert any("attn" in n for n in zero) and any("mlp" in n for n in zero), (name, zero)


@pytest.mark.parametrize("arch", ["bloom", "gptj", "mixtral"])
def test_more_hf_families_pass_every_check(arch, synthetic):
    """ALiBi without SDPA support (bloom: the architecture picks its attention), a rotary width past a small
    head (gptj: fitted to the head), a mixture of experts (mixtral): built and checked like the others."""
    model = build(lambda vocab, length: rm.hf(vocab, arch, length), synthetic)
    batch = checks.sample_batch(synthetic.train_dataset, 4)
    alarms = [f"{r.name} {r.status}: {r.detail}" for r in (c(model, batch, CFG) for c in checks.MODEL_CHECKS)]
    assert not [a for a in alarms if " PASS: " not in a], alarms


def test_hf_mistakes_are_one_line_config_errors():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match=r"model.arch=nonsense: not a transformers model type"):
        HFCausalLM(10, arch="nonsense")
    with pytest.raises(ConfigError, match=r"model.config.rope_thetaa=3: llama's config has no such key"):
        HFCausalLM(10, arch="llama", config={"rope_thetaa": 3})
