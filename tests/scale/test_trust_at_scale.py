"""What scaling a run out changes, judged in one process: every token of a step weighs the same however the step is
split into micro-batches (the real Lightning Trainer), every epoch another order, ranks reading their own data,
every rank the same model (the checksum), and the precision asked for the one used. The planted mistakes are
tests/forks/scale.py's; each names its row or symptom, and the controls beside them raise nothing."""

from __future__ import annotations

import contextlib
from functools import partial

import pytest
import pytorch_lightning as pl
import torch

from harness import checks
from harness.checks.at_start.precision import precision
from harness.checks.at_start.rank_data import copy_groups, rank_data
from harness.models import GPT, LSTM, RNN, Transformer
from harness.ops.loss import CrossEntropy, LabelSmoothing, ZLoss
from harness.train.module import HarnessModule
from tests.forks import data as fork_data
from tests.forks import scale as fork_scale
from tests.scale.conftest import step_gap

# --- every token weighs the same: one process, the real Trainer ------------------------------------------------


def one_step(data_cls, batch_size: int, accumulate: int, loss=None) -> tuple[dict, dict, HarnessModule]:
    """Weights before and after one SGD step over the 8 examples of `data_cls`, in batches of `batch_size`
    accumulated `accumulate` at a time, with `loss` (None: cross entropy); and the module (its step loss)."""
    data = fork_data.build(data_cls, batch_size=batch_size)
    torch.manual_seed(0)
    model = Transformer(data.tokenizer.vocab_size, max_len=16, d_model=32, layers=2, heads=4)
    module = HarnessModule(model, loss=loss, optimizer=partial(torch.optim.SGD, lr=0.5))
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=1,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=data)
    return initial, model.state_dict(), module


@pytest.mark.parametrize("data_cls", [fork_scale.EightDocuments, fork_scale.EightLabels], ids=["lm", "cls"])
def test_two_accumulated_micro_batches_step_as_one_batch_does(data_cls, one_thread):
    """Padded documents of unequal length: averaging the two micro-batches' means gave the 4 short documents'
    tokens the weight of the 4 long ones' (55% of the step apart); each token weighing the same, the step is one."""
    initial, whole, _ = one_step(data_cls, 8, 1)
    _, split, module = one_step(data_cls, 4, 2)
    gap, step = step_gap(whole, split, initial)
    assert step > 1e-3 and gap <= 1e-5 * step, (
        f"apart by {gap / step:.2e} of the step ({gap:.3g} of {step:.3g})"
    )


@pytest.mark.parametrize(
    "loss",
    [LabelSmoothing(0.1), ZLoss(1e-2), fork_scale.MeanOfItsOwn()],
    ids=["label_smoothing", "z_loss", "its-own-call"],
)
def test_every_loss_weighs_every_token_alike(loss, one_thread, caplog):
    """The built-in losses, and a fork's whose __call__ is its own (told, in one line, what its value is taken for)."""
    initial, whole, _ = one_step(fork_scale.EightDocuments, 8, 1, loss)
    with caplog.at_level("WARNING", logger="harness.train.module"):
        _, split, _ = one_step(fork_scale.EightDocuments, 4, 2, loss)
    gap, step = step_gap(whole, split, initial)
    assert step > 1e-3 and gap <= 1e-5 * step, (
        f"apart by {gap / step:.2e} of the step ({gap:.3g} of {step:.3g})"
    )
    told = [r.message for r in caplog.records if "__call__ of its own" in r.message]
    assert len(told) == (type(loss) is fork_scale.MeanOfItsOwn), told


def test_the_step_loss_is_the_mean_over_every_position_of_the_step(one_thread):
    """The logged loss keeps its meaning: the masked mean over the step's positions, not the micro-batches' mean."""
    initial, _, module = one_step(fork_scale.EightDocuments, 4, 2)
    data = fork_data.build(fork_scale.EightDocuments, batch_size=8)
    batch = next(iter(data.train_dataloader()))
    model = Transformer(data.tokenizer.vocab_size, max_len=16, d_model=32, layers=2, heads=4)
    model.load_state_dict(initial)
    mean = CrossEntropy()(model(batch["input_ids"]), batch["targets"], batch["loss_mask"])
    halves = [
        CrossEntropy()(model(batch["input_ids"][h]), batch["targets"][h], batch["loss_mask"][h])
        for h in (slice(0, 4), slice(4, 8))
    ]
    assert module.final_loss() == pytest.approx(mean.item(), rel=1e-5), (module.final_loss(), mean.item())
    # the old readings, the last micro-batch's mean and the mean of the two, are told apart at that tolerance
    for other in (halves[1].item(), sum(halves).item() / 2):
        assert abs(other - mean.item()) > 20 * 1e-5 * mean.item(), (other, mean.item())


# --- another order each epoch ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("SameOrderEveryEpoch", "ignores the set_epoch(epoch) Lightning calls"),
        ("StreamOfOneOrder", "never called"),
    ],
)
def test_a_loader_that_repeats_its_shuffled_order_every_epoch_is_named(name, words):
    result = checks.epoch_order(None, fork_data.build(getattr(fork_scale, name)))
    assert result.status == checks.FAIL and words in result.detail, result


@pytest.mark.parametrize(
    "data",
    [
        *(pytest.param(cls, id=name) for name, cls in sorted(fork_data.CORRECT.items())),
        pytest.param(fork_scale.NewOrderEveryEpoch, id="sampler-seeded-with-the-epoch"),
        pytest.param(fork_scale.SeededShuffle, id="seeded-generator-that-advances"),
        pytest.param(fork_scale.EightDocuments, id="unshuffled"),
    ],
)
def test_loaders_that_change_their_order_or_never_shuffle_raise_nothing(data):
    result = checks.epoch_order(None, fork_data.build(data))
    assert result.status == checks.PASS, result


def test_lightnings_distributed_sampler_and_the_built_in_loader_raise_nothing(make_config):
    from torch.utils.data import DataLoader, DistributedSampler

    from harness.config import build

    class Lightnings(fork_data.FixedClassification):  # what Lightning gives each rank: a DistributedSampler
        def train_dataloader(self):
            sampler = DistributedSampler(self.train_dataset, num_replicas=2, rank=1, shuffle=True, seed=0)
            return DataLoader(self.train_dataset, self.batch_size, sampler=sampler)

    assert checks.epoch_order(None, fork_data.build(Lightnings)).status == checks.PASS
    built_in = build(make_config().data, "data")
    built_in.prepare_data()
    built_in.setup("fit")
    before = built_in.train_dataloader().sampler.epoch
    result = checks.epoch_order(None, built_in)
    assert result.status == checks.PASS and "different orders" in result.detail, result
    assert built_in.train_dataloader().sampler.epoch == before  # read from a copy


# --- ranks read their own data: the judgement ------------------------------------------------------------------


def test_ranks_reading_copies_are_told_from_ranks_reading_duplicates():
    rows = list(range(100, 116))
    assert copy_groups([rows, rows]) == [([0, 1], 16, 16)]  # the same stream on both
    assert copy_groups([rows, [99, *rows[:-1]]])[0][0] == [0, 1]  # one behind the other: 15 of 16 alike
    assert copy_groups([rows, list(range(200, 216)), rows]) == [([0, 2], 16, 16)]  # 0 and 2 of three
    assert copy_groups([rows[::2], rows[1::2]]) == []  # a distributed sampler's shares
    few = [
        1,
        2,
        3,
        4,
    ] * 4  # data with 4 distinct examples: two ranks share contents by chance, in another order
    assert copy_groups([few, few[1:] + few[:1]]) == []
    found = rank_data([rows, rows], torch.utils.data.DataLoader(fork_scale.RankUnshardedWindows(range(4))))
    assert (
        found.status == checks.FAIL and "ranks 0 and 1" in found.detail and "every world-th" in found.detail
    )


# --- every rank holds the same model: the checksum -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_checksum_tells_one_changed_bit(dtype):
    checksum = pytest.importorskip(
        "harness.probes.layers.agreement", reason="a fork without the probes"
    ).checksum
    weights = torch.randn(64, 32, generator=torch.Generator().manual_seed(0)).to(dtype)
    nudged = weights.clone()
    nudged[7, 3] = torch.nextafter(nudged[7, 3], torch.tensor(float("inf"), dtype=dtype))
    assert checksum(weights) == checksum(weights.clone()) and checksum(weights) != checksum(nudged)
    shuffled = weights.flatten()[torch.randperm(weights.numel())].reshape(64, 32)
    assert torch.linalg.norm(shuffled.double()) == pytest.approx(torch.linalg.norm(weights.double()))
    assert checksum(shuffled) == checksum(weights)  # a sum: a permutation keeps it (a norm keeps more)


# --- the precision asked for: the judgement --------------------------------------------------------------------


def sample(vocab: int = 20) -> dict:
    ids = torch.randint(0, vocab, (4, 16), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "targets": ids.roll(-1, 1), "loss_mask": torch.ones(4, 16, dtype=torch.bool)}


def bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


MODELS = {
    "transformer": lambda: Transformer(vocab_size=20, max_len=16),
    "gpt": lambda: GPT(vocab_size=20, max_len=16),
    "rnn": lambda: RNN(vocab_size=20),
    "lstm": lambda: LSTM(vocab_size=20),
}


@pytest.mark.parametrize("name", [*MODELS, "llama", "gpt2"])
def test_models_in_bf16_autocast_compute_in_bf16_with_the_loss_in_float32(name):
    if name in MODELS:
        model = MODELS[name]()
    else:
        pytest.importorskip("transformers")
        from harness.models import HFCausalLM

        model = HFCausalLM(vocab_size=20, arch=name, max_len=16, d_model=32, layers=2, heads=2)
    result = precision(
        model, sample(), CrossEntropy(), bf16(), torch.bfloat16, "trainer.precision=bf16-mixed"
    )
    assert result.status == checks.PASS and "100% of" in result.detail and "loss in float32" in result.detail


def test_a_forward_that_turns_autocast_off_and_a_loss_on_bf16_logits_are_named():
    off = fork_scale.AutocastOff(vocab_size=20, max_len=16)
    result = precision(off, sample(), CrossEntropy(), bf16(), torch.bfloat16, "trainer.precision=bf16-mixed")
    assert (
        result.status == checks.FAIL and "ran in float32" in result.detail and "inner.blocks" in result.detail
    )
    model, low = Transformer(vocab_size=20, max_len=16), fork_scale.LowPrecisionLoss()
    result = precision(model, sample(), low, bf16(), torch.bfloat16, "trainer.precision=bf16-mixed")
    assert (
        result.status == checks.FAIL
        and "bfloat16 logits" in result.detail
        and "_log_softmax" in result.detail
    )
    # in float32 the same loss computes in float32: nothing to name
    result = precision(
        model, sample(), low, contextlib.nullcontext(), torch.float32, "trainer.precision=32-true"
    )
    assert result.status == checks.PASS, result
