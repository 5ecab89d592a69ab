"""What scaling a run out changes, on two real processes (trainer=ddp, trainer=fsdp; gloo on this CPU; the slow
tier): two ranks or two nodes of four step as one batch of eight does, ranks reading one stream or one replica's
sampler are stopped, ranks that part ways are named, a precision not used stops before the first step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness import checks
from harness.report.verdict import read_verdict
from tests.conftest import PROBES_OFF, TESTS_CONF, needs_probes, torchrun_nodes, train
from tests.scale.conftest import step_gap

FORK = (f"hydra.searchpath=[file://{TESTS_CONF}]", "data=fork")
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
    "+callbacks.initial._target_=tests.forks.scale.KeepInitialWeights",
)


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
                f"data._target_=tests.forks.scale.{data}",
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
        "data._target_=tests.forks.scale.EightDocuments",
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
        tmp_path, data_root, "data._target_=tests.forks.scale.SameStreamOnEveryRank", f"trainer={trainer}"
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
    data = "data._target_=tests.forks.scale.OneReplicaSampler"
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
        tmp_path,
        data_root,
        "data._target_=tests.forks.scale.StreamShardedByRank",
        f"trainer={trainer}",
        *args,
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
        tmp_path, data_root, "data._target_=tests.forks.data.correct.FixedClassification", "trainer=ddp"
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
        "data._target_=tests.forks.data.correct.FixedClassification",
        f"trainer={trainer}",
        f"+callbacks.planted._target_=tests.forks.scale.{callback}",
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
            ("trainer.precision=bf16-mixed", "model._target_=tests.forks.scale.AutocastOff"),
            "ran in float32",
        ),
        (
            "ddp",
            ("trainer.precision=bf16-mixed", "loss._target_=tests.forks.scale.LowPrecisionLoss"),
            "bfloat16 logits",
        ),
        (
            "fsdp",
            ("trainer.precision=bf16-mixed", "model._target_=tests.forks.scale.AutocastOff"),
            "ran in float32",
        ),
        (
            "fsdp",
            ("trainer.strategy.mixed_precision=bf16", "loss._target_=tests.forks.scale.LowPrecisionLoss"),
            "bfloat16 logits",
        ),
    ],
    ids=["ddp-autocast-off", "ddp-bf16-loss", "fsdp-autocast-off", "fsdp-bf16-loss"],
)
def test_a_precision_not_used_stops_before_the_first_step(trainer, args, words, tmp_path, data_root):
    result, run_dir = run_two(
        tmp_path,
        data_root,
        "data._target_=tests.forks.data.correct.FixedClassification",
        f"trainer={trainer}",
        *args,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    row = rows(run_dir)["precision"]
    assert row["status"] == checks.FAIL and words in row["detail"], row


@pytest.mark.slow  # the preflight alone: the ranks never start
@pytest.mark.parametrize("trainer", ["ddp", "fsdp"])
def test_a_sampler_of_one_order_fails_the_preflight_before_the_ranks_start(trainer, tmp_path, data_root):
    result, run_dir = run_two(
        tmp_path, data_root, "data._target_=tests.forks.scale.SameOrderEveryEpoch", f"trainer={trainer}"
    )
    assert result.returncode == 3, result.stderr[-3000:]
    verdict = read_verdict(run_dir)
    assert verdict["status"] == "PREFLIGHT_FAIL" and verdict["steps"] == 0, verdict
    assert rows(run_dir)["epoch_order"]["status"] == checks.FAIL
