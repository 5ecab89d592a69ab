"""The preflight can be trusted on real LLM code (tests/real_models.py: Hugging Face architectures built from
their configs, and MiniGPT, a hand-written nanoGPT-style model).

1. No false alarm: on every correct model (GPT-2, Llama, Qwen2, MiniGPT with learned or rotary positions, the
   zero-initialized-branch variants, the built-ins), on synthetic and on text data, every model check PASSes:
   not WARN, not FAIL.
2. Planted bugs: each realistic bug, planted alone, is stopped by the check meant for it (FAIL; WARN for a
   frozen non-essential tensor), and the detail names the module or parameter at fault.
3. (slow) The overfit ladder on real architectures through the real train.py: every job PASSes with a clean
   preflight. And the verdict of an HF model names its class, and reports an eval-mode gap under heavy dropout.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from harness import checks
from harness.checks import FAIL, PASS, WARN
from harness.data import SyntheticDataModule, TextDataModule
from harness.models import LSTM, RNN, HFCausalLM, Transformer
from harness.report.verdict import read_verdict
from harness.tasks.training import run
from tests import real_models as rm
from tests.conftest import PROBES_OFF, compose_config, train

CFG = {"seed": 0}
SYNTHETIC_LENGTH, TEXT_LENGTH = 16, 24


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    data = SyntheticDataModule(
        length=SYNTHETIC_LENGTH, size=16, val_size=4, root=str(tmp_path_factory.mktemp("synthetic"))
    )
    data.prepare_data()
    data.setup("fit")
    return data


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    data = TextDataModule(length=TEXT_LENGTH, root=str(tmp_path_factory.mktemp("text")))
    data.prepare_data()
    data.setup("fit")
    return data


def build(make, data) -> torch.nn.Module:
    torch.manual_seed(0)
    return make(data.tokenizer.vocab_size, data.length)


def run_check(name: str, model, batch) -> checks.CheckResult:
    """The check called `name` (looked up when run: a missing check fails its own tests alone)."""
    check = getattr(checks, name, None)
    assert check is not None, f"harness.checks has no check {name!r}"
    assert check in checks.MODEL_CHECKS, f"{name} is not in MODEL_CHECKS: the preflight would never run it"
    return check(model, batch, CFG)


# ---------------------------------------------------------------------------------------------------------
# 1. no false alarm on correct real models
# ---------------------------------------------------------------------------------------------------------

CORRECT = {  # (vocab_size, length, dropout) -> a correct model; rnn and lstm have no dropout
    "hf-gpt2": lambda vocab, length, p=0.0: rm.hf(vocab, "gpt2", length, dropout=p),
    "hf-llama": lambda vocab, length, p=0.0: rm.hf(vocab, "llama", length, dropout=p),
    "hf-qwen2": lambda vocab, length, p=0.0: rm.hf(vocab, "qwen2", length, dropout=p),
    "hf-gpt2-zeroed-c_proj": rm.gpt2_zeroed_c_proj,
    "hf-llama-wide": lambda vocab, length, p=0.0: rm.hf(vocab, "llama", length, d_model=256, dropout=p),
    "minigpt-learned": lambda vocab, length, p=0.0: rm.MiniGPT(vocab, max_len=length, dropout=p),
    "minigpt-rope": lambda vocab, length, p=0.0: rm.MiniGPT(
        vocab, max_len=length, positions="rope", dropout=p
    ),
    "minigpt-zero-init-residual": lambda vocab, length, p=0.0: rm.MiniGPT(
        vocab, max_len=length, zero_init_residual=True, dropout=p
    ),
    "minigpt-layerscale": lambda vocab, length, p=0.0: rm.MiniGPT(
        vocab, max_len=length, layerscale=True, dropout=p
    ),
    "minigpt-wide": lambda vocab, length, p=0.0: rm.MiniGPT(vocab, max_len=length, d_model=256, dropout=p),
    "x-transformers-rotary": lambda vocab, length, p=0.0: rm.XDecoder(
        vocab, max_len=length, positions="rotary", dropout=p
    ),
    "x-transformers-alibi": lambda vocab, length, p=0.0: rm.XDecoder(
        vocab, max_len=length, positions="alibi", dropout=p
    ),
    "x-transformers-absolute-glu-dropout": lambda vocab, length, p=0.0: rm.XDecoder(
        vocab, max_len=length, positions="absolute", ff_glu=True, dropout=p or 0.1
    ),
    "x-transformers-qk-norm": lambda vocab, length, p=0.0: rm.XDecoder(
        vocab, max_len=length, attn_qk_norm=True, dropout=p
    ),
    "transformer": lambda vocab, length, p=0.0: Transformer(
        vocab, max_len=length, d_model=32, layers=2, heads=4, dropout=p
    ),
    "rnn": lambda vocab, length, p=0.0: RNN(vocab, d_model=32),
    "lstm": lambda vocab, length, p=0.0: LSTM(vocab, d_model=32),
}
#: the correct models that have a dropout rate to set
WITH_DROPOUT = [name for name in CORRECT if name not in ("rnn", "lstm")]


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


# ---------------------------------------------------------------------------------------------------------
# 2. planted bugs in real models
# ---------------------------------------------------------------------------------------------------------


def minigpt(cls, **kwargs):
    return lambda vocab, length: cls(vocab, max_len=length, **kwargs)


def hf_bug(cls, arch: str):
    return lambda vocab, length: cls(vocab, arch=arch, max_len=length, d_model=32, layers=2, heads=4)


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


def test_the_zero_init_variants_really_start_with_closed_branches(synthetic):
    """What makes them hard: at init, the inner weights of every branch get an exactly zero gradient."""
    batch = checks.sample_batch(synthetic.train_dataset, 4)
    for name in ("hf-gpt2-zeroed-c_proj", "minigpt-zero-init-residual", "minigpt-layerscale"):
        model = build(CORRECT[name], synthetic)
        logits = model(batch["input_ids"])
        torch.nn.functional.cross_entropy(logits[:, -1], batch["targets"][:, -1]).backward()
        zero = [n for n, p in model.named_parameters() if p.grad is not None and not p.grad.any()]
        assert any("attn" in n for n in zero) and any("mlp" in n for n in zero), (name, zero)


# ---------------------------------------------------------------------------------------------------------
# 3. the overfit ladder and the verdict, through the real train.py (slow)
# ---------------------------------------------------------------------------------------------------------

QUICK = ("logger=csv", *PROBES_OFF, "data.length=16", "model.d_model=32")


def sweep_verdicts(sweep: Path) -> dict[str, dict]:
    """Each job's verdict of a finished sweep, keyed by its overrides."""
    found = {}
    for job in sorted((d for d in sweep.iterdir() if d.name.isdigit()), key=lambda d: int(d.name)):
        overrides = OmegaConf.load(job / ".hydra" / "overrides.yaml")
        key = " ".join(o for o in overrides if o.split("=")[0] in ("model.arch", "n", "data"))
        assert (job / "verdict.json").exists(), f"job {job.name} ({key}) wrote no verdict.json"
        found[key] = read_verdict(job)
    return found


def assert_ladder_passes(verdicts: dict[str, dict], jobs: int) -> None:
    assert len(verdicts) == jobs, sorted(verdicts)
    problems = []
    for key, verdict in verdicts.items():
        if verdict["status"] != PASS:
            problems.append(f"{key}: {verdict['status']} final_loss {verdict.get('final_loss')}")
        problems += [
            f"{key}: {c['name']} {c['status']}: {c['detail']}"
            for c in verdict["checks"]
            if c["status"] != PASS
        ]
        if not verdict["checks"]:
            problems.append(f"{key}: no preflight ran")
    assert not problems, "\n".join(problems)


def ladder(tmp_path, data_root, *models: str, jobs: int) -> dict[str, dict]:
    """The overfit ladder (n = 1, 2, 5, synthetic and text) of `models` (overrides) as one sweep through the
    real train.py: every job must PASS with a clean preflight. Returns the verdicts."""
    result = train(
        "-m",
        *models,
        "n=1,2,5",
        "data=synthetic,text",
        *QUICK,
        cwd=tmp_path,
        data_root=data_root,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    verdicts = sweep_verdicts(tmp_path / "sweep")
    assert_ladder_passes(verdicts, jobs)
    return verdicts


@pytest.mark.slow
def test_overfit_ladder_on_hf_architectures(tmp_path, data_root):
    """gpt2, llama and qwen2, n = 1, 2, 5, synthetic and text: 18 jobs, every one PASS with a clean preflight."""
    verdicts = ladder(tmp_path, data_root, "model=hf", "model.arch=gpt2,llama,qwen2", jobs=18)
    assert {v["model"] for v in verdicts.values()} == {
        "GPT2LMHeadModel",
        "LlamaForCausalLM",
        "Qwen2ForCausalLM",
    }


@pytest.mark.slow
def test_overfit_ladder_on_minigpt_with_rope(tmp_path, data_root):
    """A fork's own model through the transformer's config keys: n = 1, 2, 5, synthetic and text."""
    model = ("model=transformer", "model._target_=tests.real_models.MiniGPT", "+model.positions=rope")
    verdicts = ladder(tmp_path, data_root, *model, jobs=6)
    assert {v["model"] for v in verdicts.values()} == {"MiniGPT"}
    assert {v["model_group"] for v in verdicts.values()} == {"transformer"}


@pytest.mark.slow
def test_verdict_of_an_hf_model_and_the_eval_gap_under_heavy_dropout(tmp_path, data_root):
    """model=hf arch=gpt2, n=2: the verdict names the class and the config group, and reports eval-mode
    numbers; with every dropout at 0.6 training still memorizes (the verdict judges training), and the
    eval-mode gap on the same examples is reported as a sentence."""
    result = train(
        "-m",
        "mode=overfit",
        "n=2",
        "model=hf",
        "model.arch=gpt2",
        "model.dropout=0.0,0.6",
        *QUICK,
        cwd=tmp_path,
        data_root=data_root,
        timeout=200,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    plain, dropout = (read_verdict(tmp_path / "sweep" / job) for job in "01")
    for verdict in (plain, dropout):
        assert verdict["model"] == "GPT2LMHeadModel" and verdict["model_group"] == "hf", verdict
        for key in ("eval_loss", "eval_accuracy", "train_accuracy"):
            assert isinstance(verdict.get(key), float), (key, verdict.get(key))
        assert verdict["status"] == PASS, verdict  # memorizing 2 examples under a fixed dropout mask
    assert plain["eval_gap"] is None, plain["eval_gap"]
    assert plain["eval_accuracy"] == plain["train_accuracy"] == 1.0, plain
    gap = dropout["eval_gap"]
    assert isinstance(gap, str) and len(gap) > 20, gap
    assert dropout["eval_loss"] > dropout["final_loss"], dropout


@pytest.mark.slow
def test_fail_line_labels_the_final_loss_and_the_goal(tmp_path, data_root):
    """A run stopped long before its goal: the console FAIL line prints the final loss and the goal, labelled."""
    result = train(
        "mode.max_steps=2", "n=2", "model=hf", "model.arch=llama", *QUICK, cwd=tmp_path, data_root=data_root
    )
    assert result.returncode == 1, result.stderr[-3000:]
    verdict = read_verdict(tmp_path / "run")
    assert verdict["status"] == "FAIL" and verdict["model"] == "LlamaForCausalLM", verdict
    lines = [line for line in (result.stdout + result.stderr).splitlines() if re.search(r"\bFAIL\b", line)]
    line = next((line for line in lines if "harness.tasks.training" in line), None)
    assert line is not None, lines
    assert "goal" in line.lower() and "loss" in line.lower(), line
    assert f"{verdict['final_loss']:.4f}" in line, (verdict["final_loss"], line)


#: the correct models of section 1 a config builds (the transformer's keys for a fork's own class)
CONFIGURED = {
    "hf-gpt2": ("model=hf", "model.arch=gpt2"),
    "hf-llama": ("model=hf", "model.arch=llama"),
    "hf-qwen2": ("model=hf", "model.arch=qwen2"),
    "minigpt-learned": ("model=transformer", "model._target_=tests.real_models.MiniGPT"),
    "minigpt-rope": (
        "model=transformer",
        "model._target_=tests.real_models.MiniGPT",
        "+model.positions=rope",
    ),
    "minigpt-zero-init-residual": (
        "model=transformer",
        "model._target_=tests.real_models.MiniGPT",
        "+model.zero_init_residual=true",
    ),
    "minigpt-layerscale": (
        "model=transformer",
        "model._target_=tests.real_models.MiniGPT",
        "+model.layerscale=true",
    ),
    "x-transformers-rotary": ("model=transformer", "model._target_=tests.real_models.XDecoder"),
    "x-transformers-alibi": (
        "model=transformer",
        "model._target_=tests.real_models.XDecoder",
        "+model.positions=alibi",
    ),
    "transformer": ("model=transformer",),
    "gpt": ("model=gpt",),
}
#: (dropout, n) of each model's overfit runs, on synthetic and on text data
DROPOUT_RUNS = [(0.0, 2), (0.1, 2), (0.2, 1), (0.2, 2), (0.2, 5)]


@pytest.mark.slow  # ~25 s a model: 10 overfit runs with every probe on
@pytest.mark.parametrize("model_name", list(CONFIGURED))
def test_correct_models_with_dropout_memorize_without_a_warning_or_a_symptom(
    model_name, tmp_path_factory, data_root
):
    """Dropout 0, 0.1 and 0.2 (re-seeded, as overfit mode does): PASS, every check PASS, no eval-gap warning (eval
    mode's loss may be far above the step's) and no symptom, the activations called as functions included."""
    problems = []
    for data in ("synthetic", "text"):
        for dropout, n in DROPOUT_RUNS:
            overrides = [*CONFIGURED[model_name], f"model.dropout={dropout}", f"n={n}", f"data={data}"]
            run_dir = tmp_path_factory.mktemp("dropout")
            probes_on = ["logger=csv", "data.length=16", "model.d_model=32", "probes.plots=false"]
            verdict = run(compose_config([*overrides, *probes_on], run_dir, data_root))
            where = f"{data} dropout {dropout} n={n}"
            problems += [f"{where}: {verdict['status']}"] if verdict["status"] != PASS else []
            problems += [
                f"{where}: {c['name']} {c['status']}" for c in verdict["checks"] if c["status"] != PASS
            ]
            problems += [f"{where}: eval gap: {verdict['eval_gap']}"] if verdict["eval_gap"] else []
            problems += [f"{where}: {s['name']} in {s['where']}" for s in verdict["symptoms"]]
    assert not problems, f"{model_name}:\n" + "\n".join(problems)


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
