"""What scaling a run out changes, checked: every token of a step weighs the same however the step is split
(micro-batches, ranks), every rank reads its own data and every epoch another order, every rank holds the same
model, and the precision asked for is the one used.

The quick tier holds the real Lightning Trainer on one process and the checks' own judgements; the runs of two
processes (trainer=ddp, trainer=fsdp; gloo on this CPU) are real train.py runs, in the slow tier. The planted
mistakes are tests/fork_scale.py's; each names its row or symptom, and the controls beside them raise nothing."""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from harness import checks
from harness.checks.at_start.precision import precision
from harness.checks.at_start.rank_data import groups, rank_data
from harness.models import GPT, LSTM, RNN, Transformer
from harness.ops.loss import CrossEntropy, LabelSmoothing, ZLoss
from harness.report.verdict import read_verdict
from harness.train.module import HarnessModule
from tests import fork_data, fork_scale
from tests.conftest import PROBES_OFF, needs_probes, torchrun_nodes, train

FORK = (f"hydra.searchpath=[file://{Path(__file__).parent / 'conf'}]", "data=fork")
#: one plain SGD step, no clipping, no schedule: the weights move by exactly lr x the step's gradient
ONE_STEP = (
    "mode=full",
    "mode.max_steps=1",
    "optim=sgd",
    "optim.momentum=0",
    "schedule=constant",
    "trainer.gradient_clip_val=null",
    "model.dropout=0",
    *PROBES_OFF,
    "+callbacks.initial._target_=tests.fork_scale.KeepInitialWeights",
)


def step_gap(whole: dict, other: dict, initial: dict) -> tuple[float, float]:
    """(‖weights after one step taken whole − the same step split‖, ‖that step‖), over every tensor."""
    gap = torch.cat([(whole[k] - other[k]).flatten() for k in initial]).norm()
    step = torch.cat([(whole[k] - initial[k]).flatten() for k in initial]).norm()
    return float(gap), float(step)


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
    assert groups([rows, rows]) == [([0, 1], 16, 16)]  # the same stream on both
    assert groups([rows, [99, *rows[:-1]]])[0][0] == [0, 1]  # one behind the other: 15 of 16 alike
    assert groups([rows, list(range(200, 216)), rows]) == [([0, 2], 16, 16)]  # 0 and 2 of three
    assert groups([rows[::2], rows[1::2]]) == []  # a distributed sampler's shares
    few = [
        1,
        2,
        3,
        4,
    ] * 4  # data with 4 distinct examples: two ranks share contents by chance, in another order
    assert groups([few, few[1:] + few[:1]]) == []
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


# --- two processes: real train.py runs -------------------------------------------------------------------------


def rows(run_dir: Path) -> dict[str, dict]:
    return {c["name"]: c for c in read_verdict(run_dir)["checks"]}


def final_weights(run_dir: Path) -> dict:
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    return {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}


@pytest.fixture(scope="module")
def split_steps(tmp_path_factory, data_root) -> dict[tuple[str, str], Path]:
    """One step over 8 examples, for each of padded documents (lm) and padded classification (cls): whole (one
    batch of 8), and as two ranks of 4 under trainer=ddp; the documents also under trainer=fsdp, and as two ranks
    of two accumulated micro-batches of 2."""
    made = {}
    splits = {
        "whole": ("data.batch_size=8",),
        "ddp": ("data.batch_size=4", "trainer=ddp"),
        "fsdp": ("data.batch_size=4", "trainer=fsdp"),
        "ddp_accumulated": ("data.batch_size=2", "trainer=ddp", "+trainer.accumulate_grad_batches=2"),
    }
    for task, data in (("lm", "EightDocuments"), ("cls", "EightLabels")):
        for split, args in splits.items():
            if task == "cls" and split in ("fsdp", "ddp_accumulated"):
                continue
            cwd = tmp_path_factory.mktemp(f"{task}-{split}")
            result = train(
                *FORK,
                f"data._target_=tests.fork_scale.{data}",
                *ONE_STEP,
                *args,
                cwd=cwd,
                data_root=data_root,
            )
            assert result.returncode == 0, result.stderr[-3000:]
            made[task, split] = cwd / "run"
    return made


@pytest.mark.slow  # three train.py runs a task, two of them of two processes
@pytest.mark.parametrize(
    ("task", "split"), [("lm", "ddp"), ("cls", "ddp"), ("lm", "fsdp"), ("lm", "ddp_accumulated")]
)
def test_two_ranks_of_four_step_as_one_batch_of_eight_does(split_steps, task, split):
    whole, initial = (
        final_weights(split_steps[task, "whole"]),
        torch.load(split_steps[task, "whole"] / "initial.pt"),
    )
    gap, step = step_gap(whole, final_weights(split_steps[task, split]), initial)
    assert step > 1e-3 and gap <= 1e-5 * step, (
        f"apart by {gap / step:.2e} of the step ({gap:.3g} of {step:.3g})"
    )


@pytest.mark.slow  # two torchrun launches, one process each
def test_two_nodes_of_four_step_as_one_batch_of_eight_does(split_steps, tmp_path):
    """Two "machines" on 127.0.0.1 (torchrun --nnodes=2, a c10d rendezvous), each a rank of 4 documents."""
    run_dir = tmp_path / "run"
    args = (
        *FORK,
        "data._target_=tests.fork_scale.EightDocuments",
        *ONE_STEP,
        "data.batch_size=4",
        "trainer=ddp",
    )
    nodes = torchrun_nodes(
        *args,
        "trainer.devices=1",
        "trainer.num_nodes=2",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
        name="step",
    )
    assert [code for code, _ in nodes] == [0, 0], nodes[0][1][-3000:] + nodes[1][1][-3000:]
    whole = split_steps["lm", "whole"]
    gap, step = step_gap(final_weights(whole), final_weights(run_dir), torch.load(whole / "initial.pt"))
    assert step > 1e-3 and gap <= 1e-5 * step, (
        f"apart by {gap / step:.2e} of the step ({gap:.3g} of {step:.3g})"
    )


def run_two(cwd: Path, data_root: Path, *args: str):
    """A short mode=full run of two processes on a fork's data; (result, its run dir)."""
    plots = ("probes.plots=false",) if PROBES_OFF else ()  # a fork without the probes has no such key
    common = ("mode=full", "mode.max_steps=12", "mode.val_every=1000", *plots)
    cwd.mkdir(parents=True, exist_ok=True)
    return train(*FORK, *common, *args, cwd=cwd, data_root=data_root), cwd / "run"


@pytest.mark.slow  # two processes
@pytest.mark.parametrize("trainer", ["ddp", "fsdp"])
def test_ranks_reading_one_stream_stop_before_the_first_step(trainer, tmp_path, data_root):
    result, run_dir = run_two(
        tmp_path, data_root, "data._target_=tests.fork_scale.SameStreamOnEveryRank", f"trainer={trainer}"
    )
    assert result.returncode == 3, result.stderr[-3000:]
    verdict, row = read_verdict(run_dir), rows(run_dir)["rank_data"]
    assert verdict["status"] == "PREFLIGHT_FAIL" and verdict["steps"] == 0, verdict
    assert (
        row["status"] == checks.FAIL
        and "ranks 0 and 1" in row["detail"]
        and "every world-th" in row["detail"]
    )


@pytest.mark.slow  # two processes
def test_a_sampler_made_for_one_process_is_named_and_preflight_warn_trains_on(tmp_path, data_root):
    data = "data._target_=tests.fork_scale.OneReplicaSampler"
    result, run_dir = run_two(tmp_path / "stop", data_root, data, "trainer=ddp")
    assert result.returncode == 3 and "DistributedSampler" in rows(run_dir)["rank_data"]["detail"]
    result, run_dir = run_two(tmp_path / "warn", data_root, data, "trainer=ddp", "preflight=warn")
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_verdict(run_dir)["status"] == "DONE" and rows(run_dir)["rank_data"]["status"] == checks.FAIL


@needs_probes
@pytest.mark.slow  # two processes
@pytest.mark.parametrize(
    ("trainer", "args"),
    [
        ("ddp", ("trainer.precision=bf16-mixed",)),
        ("fsdp", ("trainer.strategy.mixed_precision=bf16",)),
    ],
)
def test_a_sound_run_on_two_ranks_raises_none_of_it(trainer, args, tmp_path, data_root):
    """A stream sharded by rank, in lower precision, probes on: rank_data and precision PASS, no ranks_diverged."""
    result, run_dir = run_two(
        tmp_path, data_root, "data._target_=tests.fork_scale.StreamShardedByRank", f"trainer={trainer}", *args
    )
    assert result.returncode == 0, result.stderr[-3000:]
    verdict, found = read_verdict(run_dir), rows(run_dir)
    assert verdict["status"] == "DONE" and all(r["status"] == checks.PASS for r in found.values()), found
    assert "2 ranks read their own examples" in found["rank_data"]["detail"]
    assert "bfloat16" in found["precision"]["detail"]
    assert not [s for s in verdict["symptoms"] if s["name"] == "ranks_diverged"], verdict["symptoms"]


@pytest.mark.slow  # two processes
def test_lightnings_own_distributed_sampler_raises_nothing(tmp_path, data_root):
    result, run_dir = run_two(
        tmp_path, data_root, "data._target_=tests.fork_data.FixedClassification", "trainer=ddp"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert rows(run_dir)["rank_data"]["status"] == checks.PASS


@needs_probes
@pytest.mark.slow  # two processes
@pytest.mark.parametrize(
    ("trainer", "planted", "where"),
    [
        ("ddp", "NudgeOneRank", "token_embedding.weight"),
        ("ddp", "LateParameter", "late_bias"),
        # clipping under FSDP refuses a plain tensor beside the sharded ones: the late parameter runs unclipped
        ("fsdp", "LateParameter trainer.gradient_clip_val=null", "late_bias"),
        ("fsdp", "NudgeStepCount", "optimizer step count"),
    ],
)
def test_ranks_that_part_ways_are_named(trainer, planted, where, tmp_path, data_root):
    callback, *extra = planted.split()
    result, run_dir = run_two(
        tmp_path,
        data_root,
        "data._target_=tests.fork_data.FixedClassification",
        f"trainer={trainer}",
        f"+callbacks.planted._target_=tests.fork_scale.{callback}",
        *extra,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = [s for s in read_verdict(run_dir)["symptoms"] if s["name"] == "ranks_diverged"]
    assert len(found) == 1 and found[0]["where"] == where and "rank 1" in found[0]["detail"], found


@pytest.mark.slow  # two processes
@pytest.mark.parametrize(
    ("trainer", "args", "words"),
    [
        (
            "ddp",
            ("trainer.precision=bf16-mixed", "model._target_=tests.fork_scale.AutocastOff"),
            "ran in float32",
        ),
        (
            "ddp",
            ("trainer.precision=bf16-mixed", "loss._target_=tests.fork_scale.LowPrecisionLoss"),
            "bfloat16 logits",
        ),
        (
            "fsdp",
            ("trainer.precision=bf16-mixed", "model._target_=tests.fork_scale.AutocastOff"),
            "ran in float32",
        ),
        (
            "fsdp",
            ("trainer.strategy.mixed_precision=bf16", "loss._target_=tests.fork_scale.LowPrecisionLoss"),
            "bfloat16 logits",
        ),
    ],
    ids=["ddp-autocast-off", "ddp-bf16-loss", "fsdp-autocast-off", "fsdp-bf16-loss"],
)
def test_a_precision_not_used_stops_before_the_first_step(trainer, args, words, tmp_path, data_root):
    result, run_dir = run_two(
        tmp_path, data_root, "data._target_=tests.fork_data.FixedClassification", f"trainer={trainer}", *args
    )
    assert result.returncode == 3, result.stderr[-3000:]
    row = rows(run_dir)["precision"]
    assert row["status"] == checks.FAIL and words in row["detail"], row


@pytest.mark.slow  # the preflight alone: the ranks never start
@pytest.mark.parametrize("trainer", ["ddp", "fsdp"])
def test_a_sampler_of_one_order_fails_the_preflight_before_the_ranks_start(trainer, tmp_path, data_root):
    result, run_dir = run_two(
        tmp_path, data_root, "data._target_=tests.fork_scale.SameOrderEveryEpoch", f"trainer={trainer}"
    )
    assert result.returncode == 3, result.stderr[-3000:]
    verdict = read_verdict(run_dir)
    assert verdict["status"] == "PREFLIGHT_FAIL" and verdict["steps"] == 0, verdict
    assert rows(run_dir)["epoch_order"]["status"] == checks.FAIL
