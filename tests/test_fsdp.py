"""Sharded training (trainer=fsdp): the units taken from the model, the door's rules, and two real processes on
this CPU (gloo) whose probes report the whole layers, under the model's own names, as one process does.

The two-process runs cost seconds each: they are in the slow tier."""

from __future__ import annotations

import csv
import json
import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from harness.cli.overrides import check_overrides
from harness.models import GPT, Transformer
from harness.tasks.job import perform
from harness.train.distributed.devices import processes
from harness.train.distributed.sharding import materialize, unit_names
from tests.conftest import (
    PROBES_OFF,
    compose_config,
    needs_probes,
    run_command,
    torchrun_nodes,
    train,
)

ROOT = Path(__file__).resolve().parents[1]
#: a whole run, short: synthetic data of length 12, plots off
SHORT = ["data.length=12", "probes.plots=false"]
# the figures compared between a sharded run and one process: the weights' and update ratios at every step, the
# histograms every 10 (the defaults: 20 and 100); past the first steps an entry at a bucket's edge may fall either
# side of it by the rounding of a sum taken in another order
EVERY_STEP = ["probes.histograms.every=10", "probes.norms.weight_every=1", "probes.norms.ratio_every=1"]


# --- the units: the model's repeated blocks ---------------------------------------------------------------------


class Inner(nn.Module):
    """A block that holds a ModuleList of its own (two heads): inside a unit, so no unit itself."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(8, 4)
        self.mixed = nn.ModuleList([nn.Linear(4, 4), nn.ReLU()])  # not one class: looked inside, no unit
        self.stack = nn.Sequential(nn.ModuleList(Inner() for _ in range(3)))


def test_units_are_the_repeated_children_of_a_module_list():
    assert unit_names(GPT(vocab_size=20, max_len=12)) == [f"blocks.{i}" for i in range(4)]
    assert unit_names(Transformer(vocab_size=20, max_len=12, d_model=16, layers=3)) == [
        "blocks.0",
        "blocks.1",
        "blocks.2",
    ]
    assert unit_names(Nested()) == ["stack.0.0", "stack.0.1", "stack.0.2"]  # the outermost list only
    assert unit_names(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))) == []  # no list: the root unit alone


def test_units_of_a_hugging_face_model_are_its_layers():
    pytest.importorskip("transformers")
    from harness.models import HFCausalLM

    model = HFCausalLM(vocab_size=20, arch="llama", max_len=12, d_model=16, layers=2, heads=2)
    assert unit_names(model) == ["lm.model.layers.0", "lm.model.layers.1"]


def test_parameter_names_are_the_models_own_under_any_wrapper():
    """A wrapper's infix (FSDP1's, wrapper-style activation checkpointing's, torch.compile's) is not a name of
    the model: the probes log `blocks.0.weight` whichever wraps it."""
    from harness.probes.layers.norms import parameter_names

    inner = nn.Module()
    inner._checkpoint_wrapped_module = nn.Linear(2, 2)
    wrapped = nn.Module()
    wrapped._fsdp_wrapped_module = nn.ModuleDict({"blocks": nn.ModuleList([inner])})
    names = [name for name, _ in parameter_names(wrapped)]
    assert names == ["blocks.0.weight", "blocks.0.bias"], names


# --- the door ---------------------------------------------------------------------------------------------------


def test_fsdp_runs_one_process_a_device(make_config):
    assert processes(make_config("trainer=fsdp").trainer) == 2


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["-m", "trainer=fsdp", "data.length=10,20"], "trainer=fsdp"),
        (["trainer=fsdp", "trainer.devices=auto"], "trainer.devices=auto"),
        (["trainer=fsdp", "trainer.strategy.mixed_precision=fp8"], "trainer.strategy.mixed_precision=fp8"),
        (["trainer=fsdp", "trainer.devices=4096"], "trainer.devices=4096"),
        (["trainer=ddp", "trainer.strategy=fsdp"], "trainer.strategy=fsdp: Lightning's FSDPStrategy (FSDP1)"),
        (
            ["trainer=ddp", "+trainer.strategy._target_=pytorch_lightning.strategies.ModelParallelStrategy"],
            "trainer.strategy=pytorch_lightning.strategies.ModelParallelStrategy: a plain",
        ),
    ],
    ids=["local-sweep", "auto", "precision", "devices", "fsdp1", "model-parallel"],
)
def test_unsound_fsdp_settings_are_refused(argv, names, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(SystemExit) as stop:
        check_overrides(argv, ROOT / "conf")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1 and names in lines[0], lines


def test_one_sharded_process_passes_the_door():
    """One rank: the door builds the Trainer but fits nothing with it (its one-step trial module has no model to
    shard); the run itself shards the harness's module."""
    overrides = ["trainer=fsdp", "trainer.devices=1", "hydra.run.dir=unused", "hydra.sweep.dir=unused"]
    assert check_overrides(overrides, ROOT / "conf") == []


def test_a_sharded_checkpoint_folder_is_refused_with_how_to_make_it_one_file(tmp_path):
    from harness.errors import ConfigError
    from harness.train.checkpoints import read_checkpoint

    folder = tmp_path / "last.ckpt"  # what save_distributed_checkpoint=true writes: a folder
    folder.mkdir()
    with pytest.raises(ConfigError) as err:
        read_checkpoint(str(folder))
    assert str(err.value).startswith(f"ckpt_path={folder}") and "consolidate_checkpoint" in str(err.value)


# --- two processes, one run ---------------------------------------------------------------------------------------


def metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    """metrics.csv as {step: {key: value}}, the empty cells left out."""
    rows: dict[int, dict[str, float]] = {}
    with (run_dir / "metrics.csv").open() as f:
        for row in csv.DictReader(f):
            values = {k: float(v) for k, v in row.items() if v not in ("", None) and k != "step"}
            rows.setdefault(int(row["step"]), {}).update(values)
    return rows


def mismatches(one: dict, sharded: dict, prefixes: tuple, rel: float, floor: float = 0.0) -> list:
    """(step, key, one process's value, sharded value) for every logged value under `prefixes` that the two runs
    do not share to `rel` relative (or `floor` absolute, for values near zero); a key only one run logs too."""
    wrong = []

    def close(x: float, y: float) -> bool:
        return math.isclose(x, y, rel_tol=rel, abs_tol=floor)

    for step in sorted(set(one) | set(sharded)):
        a, b = one.get(step, {}), sharded.get(step, {})
        for key in sorted(k for k in set(a) | set(b) if k.startswith(prefixes)):
            x, y = a.get(key), b.get(key)
            same = x is not None and y is not None and (math.isnan(x) and math.isnan(y) or close(x, y))
            if not same:
                wrong.append((step, key, x, y))
    return wrong


@pytest.fixture(scope="module")
def overfit_pair(tmp_path_factory, data_root) -> dict[str, tuple]:
    """`mode=overfit n=2 model=gpt` with trainer=fsdp (two processes) and trainer=cpu (one), same seed: overfit
    mode gives every rank the same examples, so the two are the same run. TensorBoard: the histograms' buckets."""
    runs = {}
    for trainer in ("fsdp", "cpu"):
        cwd = tmp_path_factory.mktemp(trainer)
        args = [
            "mode=overfit",
            "n=2",
            "model=gpt",
            f"trainer={trainer}",
            "logger=tensorboard",
            *SHORT,
            *EVERY_STEP,
        ]
        result = train(*args, cwd=cwd, data_root=data_root)
        runs[trainer] = (result, cwd / "run")
    return runs


@needs_probes
@pytest.mark.slow  # two whole train.py runs, one of them two processes
def test_fsdp_overfit_passes_and_its_probes_match_one_process(overfit_pair):
    (result, run_dir), (alone, alone_dir) = overfit_pair["fsdp"], overfit_pair["cpu"]
    assert result.returncode == 0 and alone.returncode == 0, (result.stderr + alone.stderr)[-3000:]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["status"] == "PASS" and verdict["accuracy"] == 1.0, verdict
    assert (run_dir / "train_ddp_process_1.log").is_file(), "rank 1 never started: not a sharded run"
    log = (run_dir / "train.log").read_text()
    assert "fsdp: 2 ranks, 4 units (blocks.0, blocks.1, blocks.2, blocks.3)" in log, log[-2000:]
    one, sharded = metrics(alone_dir), metrics(run_dir)
    grads = {k for row in sharded.values() for k in row if k.startswith("grad_norm/")}
    assert "grad_norm/blocks.0.attention.qkv.weight" in grads and not any("_fsdp" in k for k in grads), grads
    assert len([s for s in sharded if "grad_norm/total" in sharded[s]]) == verdict["steps"]
    # every logged per-layer norm and update ratio, at every step, under the same names
    assert not mismatches(one, sharded, ("grad_norm/", "weight_norm/", "update_ratio/"), 1e-4)
    # the whole tensors' statistics, the activations, the logits: the same too (a mean near 0 to 1e-7)
    prefixes = ("grad_stats/", "weight_stats/", "act/", "logit/", "train/")
    assert not mismatches(one, sharded, prefixes, 1e-4, floor=1e-7)
    assert verdict["symptoms"] == [] and verdict["dead_params"] == []
    # the probes that run forward passes of their own: every rank runs them in step, rank 0 writes
    assert not mismatches(one, sharded, ("grad_by_position/", "embeddings/"), 1e-4)
    reference = json.loads((alone_dir / "verdict.json").read_text())["grad_by_position"]
    for when in ("init", "final"):
        assert verdict["grad_by_position"][when] == pytest.approx(reference[when], rel=1e-4), when
    assert (run_dir / "datapoints.jsonl").read_text() == (alone_dir / "datapoints.jsonl").read_text()


def histograms(run_dir: Path) -> dict[tuple[str, int], tuple]:
    """Every histogram TensorBoard got: (tag, step) -> (entries, bucket counts)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"histograms": 0})
    events.Reload()
    return {
        (tag, event.step): (event.histogram_value.num, list(event.histogram_value.bucket))
        for tag in events.Tags()["histograms"]
        for event in events.Histograms(tag)
    }


@needs_probes
@pytest.mark.slow
def test_histogram_buckets_count_the_whole_tensor_under_sharding(overfit_pair):
    """Each rank counts its slice over the whole tensor's range; the counts summed are the one-process run's."""
    (result, run_dir), (_, alone_dir) = overfit_pair["fsdp"], overfit_pair["cpu"]
    assert result.returncode == 0, result.stderr[-3000:]
    sharded, one = histograms(run_dir), histograms(alone_dir)
    assert ("grad_hist/blocks.0.attention.qkv.weight", 0) in one and len(one) > 50, sorted(one)[:5]
    assert sharded == one


@needs_probes
@pytest.mark.slow
def test_the_preflight_runs_once_on_rank_0_before_sharding_and_says_so(overfit_pair):
    result, run_dir = overfit_pair["fsdp"]
    assert result.returncode == 0, result.stderr[-3000:]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["checks"] and all(c["status"] == "PASS" for c in verdict["checks"]), verdict["checks"]
    logs = {p.name: p.read_text() for p in run_dir.glob("train*.log")}
    assert "preflight: run on rank 0 with the whole model, before sharding" in logs["train.log"]
    assert [text.count("preflight (") for text in logs.values()].count(0) == 1, "rank 1 ran the preflight"


# --- a model too large for one rank: built on the meta device, its weights made once sharded ----------------------


def test_init_weights_sets_every_parameter_of_a_gpt_made_on_the_meta_device():
    """Materialized from the meta device (empty memory), then init_weights(): the same weights as a whole model
    given init_weights() from the same seed, every one of them (empty memory left anywhere would differ), tied."""
    whole = GPT(vocab_size=20, max_len=16)
    torch.manual_seed(0)
    whole.init_weights()
    with torch.device("meta"):
        empty = GPT(vocab_size=20, max_len=16)
    torch.manual_seed(0)  # rank 0 draws from the run's seed
    materialize(empty, torch.device("cpu"), rank=0)
    assert empty.head.weight is empty.token_embedding.weight, "the tie was lost"
    for (name, a), b in zip(whole.state_dict().items(), empty.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_model_without_init_weights_is_refused_for_meta_init(capsys):
    with pytest.raises(SystemExit) as stop:
        check_overrides(["trainer=fsdp", "trainer.strategy.meta_init=true", "model=rnn"], ROOT / "conf")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: trainer.strategy.meta_init=") and "has no init_weights()" in lines[0]


def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1])


@needs_probes
@pytest.mark.slow  # two processes
def test_meta_init_runs_the_data_checks_then_init_loss_once_sharded_and_skips_the_rest(tmp_path, data_root):
    args = ["mode=overfit", "n=2", "model=gpt", "trainer=fsdp", "trainer.strategy.meta_init=true", *SHORT]
    fork = f"+preflight_tests=[{ROOT / 'examples' / 'preflight.py'}]"  # a fork's own check of the model
    result = train(*args, fork, cwd=tmp_path, data_root=data_root)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "run"
    verdict = json.loads((run_dir / "verdict.json").read_text())
    rows = {row["name"]: row for row in verdict["checks"]}
    assert verdict["status"] == "PASS", verdict
    assert all(
        rows[name]["status"] == "PASS" for name in ("batch_format", "ids_in_range", "data_roundtrip", "twins")
    )
    assert rows["init_loss"]["status"] == "PASS" and "expected ~ln(20)" in rows["init_loss"]["detail"]
    skipped = {name for name, row in rows.items() if row["status"] == "SKIP"}
    assert {"gradient_flow", "causality", "determinism", "finite"} <= skipped, rows
    assert "test_eval_deterministic" in skipped, "the fork's check of the model crashed on the meta device"
    assert all("meta device" in rows[name]["detail"] for name in skipped)
    assert "preflight, as training starts: init_loss PASS" in (run_dir / "train.log").read_text()
    # each rank drew its own slices: rank 1's half of a weight is no copy of rank 0's
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert torch.equal(state["model.head.weight"], state["model.token_embedding.weight"]), "the tie was lost"
    weight = state["model.blocks.0.mlp.up.weight"]
    half = weight.shape[0] // 2
    assert abs(correlation(weight[:half], weight[half:])) < 0.5


@pytest.mark.slow  # two processes
def test_a_meta_init_model_that_fails_init_loss_once_sharded_never_trains(tmp_path, data_root):
    args = ["mode=overfit", "n=2", "model=gpt", "model._target_=tests.sick_models.LoudGPT", "trainer=fsdp"]
    result = train(
        *args,
        "trainer.strategy.meta_init=true",
        *PROBES_OFF,
        "data.length=12",
        cwd=tmp_path,
        data_root=data_root,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "PREFLIGHT_FAIL" and verdict["steps"] == 0, verdict
    row = next(row for row in verdict["checks"] if row["name"] == "init_loss")
    assert row["status"] == "FAIL" and "output scale at init is off" in row["detail"], row


@pytest.mark.slow  # two processes
def test_a_sanity_validation_leaves_the_sharded_model_in_slices_for_the_probes(tmp_path, data_root):
    """Forwards without a backward leave FSDP's root unit gathered: listed then, the probes held tensors whose
    memory FSDP freed at the next step (a segmentation fault at the first step's norms)."""
    args = ["mode=full", "mode.max_steps=6", "model=gpt", "trainer=fsdp", "+trainer.num_sanity_val_steps=2"]
    result = train(*args, *SHORT, cwd=tmp_path, data_root=data_root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["status"] == "DONE"
    assert "grad_norm/blocks.0.attention.qkv.weight" in metrics(tmp_path / "run")[0]


@needs_probes
@pytest.mark.slow  # two torchrun launches, one process each
def test_two_torchrun_nodes_meet_on_a_rendezvous_and_train_as_one_process_does(
    overfit_pair, tmp_path, data_root
):
    """Two "machines" on 127.0.0.1: each a torchrun launch with --nnodes=2 and one process, meeting through a c10d
    rendezvous, each running train.py from the top, as on a cluster. Same seed, overfit mode: the one-process
    run's per-layer norms, under the same names; rank 0 alone writes the run's files, each rank its own log."""
    _, alone_dir = overfit_pair["cpu"]
    run_dir = tmp_path / "run"
    args = ["mode=overfit", "n=2", "model=gpt", "trainer=fsdp", "logger=tensorboard", *SHORT, *EVERY_STEP]
    args += ["trainer.devices=1", "trainer.num_nodes=2", f"data.root={data_root}", f"hydra.run.dir={run_dir}"]
    nodes = torchrun_nodes(*args, cwd=tmp_path, name="two-nodes")
    assert [code for code, _ in nodes] == [0, 0], nodes[0][1][-3000:] + nodes[1][1][-3000:]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["status"] == "PASS", verdict
    logs = {p.name: p.read_text() for p in run_dir.glob("train*.log")}
    assert sorted(logs) == ["train.log", "train_rank_1.log"], sorted(logs)
    assert "fsdp: 2 ranks, 4 units" in logs["train.log"] and "PASS:" in logs["train.log"]
    assert logs["train.log"].count("preflight (") == 1 and "PASS:" not in logs["train_rank_1.log"]
    one, sharded = metrics(alone_dir), metrics(run_dir)
    assert "grad_norm/blocks.0.attention.qkv.weight" in sharded[0], sorted(sharded[0])[:10]
    assert not mismatches(one, sharded, ("grad_norm/", "weight_norm/", "update_ratio/"), 1e-4)


@needs_probes
@pytest.mark.slow  # two whole train.py runs, one of them two processes
def test_a_hugging_face_model_with_activation_checkpointing_matches_one_process(tmp_path_factory, data_root):
    """model=hf: its decoder layers are the units; activation checkpointing recomputes them in the backward
    (composable: no wrapper, the names kept) and changes no figure."""
    pytest.importorskip("transformers")
    args = ["mode=overfit", "n=2", "model=hf", "preflight=false", *SHORT]
    runs = {}
    for trainer in (["trainer=fsdp", "trainer.strategy.activation_checkpointing=true"], ["trainer=cpu"]):
        cwd = tmp_path_factory.mktemp(trainer[0].split("=")[1])
        result = train(*args, *trainer, cwd=cwd, data_root=data_root)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[trainer[0]] = cwd / "run"
    log = (runs["trainer=fsdp"] / "train.log").read_text()
    assert "2 units (lm.model.layers.0, lm.model.layers.1) + the root, activation checkpointing" in log
    one, sharded = metrics(runs["trainer=cpu"]), metrics(runs["trainer=fsdp"])
    assert "grad_norm/lm.model.layers.1.self_attn.q_proj.weight" in sharded[0], sorted(sharded[0])[:5]
    # a norm's rounding is relative to the largest gradient's: the norms' gradients at 3e-5 by step 17 differ by 3e-9
    assert not mismatches(one, sharded, ("grad_norm/", "weight_norm/", "update_ratio/"), 1e-4, floor=1e-8)
    assert not mismatches(one, sharded, ("act/", "train/"), 1e-4, floor=1e-7)


@pytest.mark.slow
def test_a_nonfinite_gradient_stops_every_sharded_rank_with_its_verdict(tmp_path, data_root):
    """The guard's norms are the whole gradients' (reduced across ranks), so every rank sees the NaN at the same
    step, stops before its update and names the module (a forward run by every rank, in step)."""
    args = [
        "mode=overfit",
        "n=2",
        "trainer=fsdp",
        "model=rnn",
        "model._target_=tests.fork_models.ExplodingGRU",
    ]
    result = train(*args, "preflight=false", *PROBES_OFF, "data.length=12", cwd=tmp_path, data_root=data_root)
    assert result.returncode == 4, result.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "NONFINITE" and "blowup" in verdict["nonfinite"]["where"], verdict
    assert verdict["nonfinite"]["step"] == verdict["steps"], verdict


@pytest.mark.slow
def test_a_nan_in_one_ranks_slice_alone_stops_every_rank(tmp_path, data_root):
    """NaNInOneRow: only rank 1's slice of `trap`'s gradient is NaN. Judged on its own slice, rank 0 would step on
    while rank 1 stopped, and wait for it forever (the timeout turns that into a failure); judged on the whole
    gradient, both stop at step 0."""
    args = ["mode=overfit", "n=2", "trainer=fsdp", "model._target_=tests.sick_models.NaNInOneRow"]
    args += ["preflight=false", *PROBES_OFF, "data.length=12"]
    result = train(*args, cwd=tmp_path, data_root=data_root, timeout=120)
    assert result.returncode == 4, result.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["nonfinite"] == {"step": 0, "where": "non-finite gradient in model.trap"}, verdict


@pytest.mark.slow
def test_fsdp_mixed_precision_trains_in_bf16_and_passes(tmp_path, data_root):
    """mixed_precision=bf16: the weights gathered and the blocks computed in bf16, the gradients reduced in fp32."""
    args = ["mode=overfit", "n=2", "model=gpt", "trainer=fsdp", "trainer.strategy.mixed_precision=bf16"]
    result = train(*args, "preflight=false", *PROBES_OFF, "data.length=12", cwd=tmp_path, data_root=data_root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["status"] == "PASS"
    assert "+ the root, bf16 compute" in (tmp_path / "run" / "train.log").read_text()


SICK = ["preflight=false", "probes.datapoints=null", "probes.embeddings=null", "mode.target_loss=0"]


@needs_probes
@pytest.mark.slow
def test_a_dead_relu_is_named_under_sharding(tmp_path, data_root):
    result = train(
        "trainer=fsdp",
        "model._target_=tests.sick_models.NegativeBiasReLU",
        "mode.max_steps=60",
        *SICK,
        *SHORT,
        cwd=tmp_path,
        data_root=data_root,
    )
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "FAIL" and result.returncode == 1, result.stderr[-3000:]  # target_loss=0
    [units] = [s for s in verdict["symptoms"] if s["name"] == "dead_units"]
    assert units["where"] == "net.1" and units["value"] == 1.0, units
    assert sorted(verdict["dead_params"]) == ["net.0.bias", "net.0.weight"], verdict


@needs_probes
@pytest.mark.slow
def test_frozen_and_unused_parameters_are_named_under_sharding(tmp_path, data_root):
    result = train(
        "trainer=fsdp",
        "model=rnn",
        "model._target_=tests.fork_models.UnusedParamRNN",
        "mode.max_steps=30",
        *SICK,
        *SHORT,
        cwd=tmp_path,
        data_root=data_root,
    )
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "FAIL" and result.returncode == 1, result.stderr[-3000:]  # target_loss=0
    assert sorted(verdict["dead_params"]) == ["head.bias", "unused"], verdict
    rows = metrics(tmp_path / "run")
    assert {row["grad_norm/missing"] for row in rows.values() if "grad_norm/missing" in row} == {2.0}
    assert all(
        row["grad_norm/rnn.weight_hh_l0"] > 0 for row in rows.values() if "grad_norm/rnn.weight_hh_l0" in row
    )


#: mode=full, short: 64 examples in batches of 8, validated and saved every 6 steps, probes and preflight off
FULL = ["mode=full", "data.size=64", "data.batch_size=8", "mode.val_every=6", "mode.ckpt_every=6"]
FULL += ["mode.log_every=1", "model.dropout=0.1", "preflight=false", "mode.progress_bar=false", *PROBES_OFF]


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory, data_root) -> dict[str, Path]:
    """mode=full, 12 steps: trainer=fsdp straight, fsdp 6 steps then resumed from its last.ckpt to 12, and ddp."""
    runs = {}
    for name, args in (
        ("first", ["trainer=fsdp", "mode.max_steps=6"]),
        ("resumed", ["trainer=fsdp", "mode.max_steps=12"]),
        ("fsdp", ["trainer=fsdp", "mode.max_steps=12"]),
        ("ddp", ["trainer=ddp", "mode.max_steps=12"]),
    ):
        cwd = tmp_path_factory.mktemp(name)
        if name == "resumed":
            args.append(f"ckpt_path={runs['first'] / 'checkpoints' / 'last.ckpt'}")
        result = train(*args, *FULL, "data.length=12", cwd=cwd, data_root=data_root)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = cwd / "run"
    return runs


def checkpoint(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)


@needs_probes
@pytest.mark.slow
def test_a_parameter_dead_in_one_ranks_slice_but_alive_in_the_others_is_alive(tmp_path, data_root):
    """HalfUsed: rank 0's slice of `pair` never gets a gradient, rank 1's does: the whole gradient is not zero."""
    args = ["trainer=fsdp", "model._target_=tests.sick_models.HalfUsed", "mode.max_steps=15", *SICK, *SHORT]
    result = train(*args, cwd=tmp_path, data_root=data_root)
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "FAIL" and result.returncode == 1, result.stderr[-3000:]  # target_loss=0
    assert verdict["dead_params"] == [] and verdict["steps"] == 15, verdict
    norms = [row["grad_norm/pair"] for row in metrics(tmp_path / "run").values() if "grad_norm/pair" in row]
    assert len(norms) == 15 and min(norms) > 0, norms


@pytest.mark.slow  # whole runs of two processes each
def test_fsdp_full_mode_gives_each_rank_its_share_as_ddp_does(full_runs):
    """mode=full: each rank its own share of every epoch. Sharded or not, data parallelism over the same shares is
    the same training: the losses of trainer=fsdp and trainer=ddp agree step by step."""
    verdict = json.loads((full_runs["fsdp"] / "verdict.json").read_text())
    assert verdict["status"] == "DONE" and verdict["steps"] == 12 and verdict["val_loss"] is not None, verdict
    sharded, ddp = metrics(full_runs["fsdp"]), metrics(full_runs["ddp"])
    assert len([s for s in sharded if "train/loss" in sharded[s]]) == 12
    assert not mismatches(ddp, sharded, ("train/", "val/"), 1e-4, floor=1e-7)
    last, reference = checkpoint(full_runs["fsdp"]), checkpoint(full_runs["ddp"])
    assert last["global_step"] == 12 and sorted(last["state_dict"]) == sorted(reference["state_dict"])


@pytest.mark.slow
def test_a_sharded_run_resumes_bit_for_bit_from_its_last_checkpoint(full_runs):
    """Saved consolidated (one file, as without sharding), read back into the shards mid-epoch, dropout on: the
    resumed run is the straight one, weights and losses."""
    resumed, straight = checkpoint(full_runs["resumed"]), checkpoint(full_runs["fsdp"])
    weights, expected = resumed["state_dict"], straight["state_dict"]
    assert resumed["global_step"] == 12 and sorted(weights) == sorted(expected)
    assert all(torch.equal(weights[k], expected[k]) for k in expected), "resumed weights differ"
    after, losses = metrics(full_runs["resumed"]), metrics(full_runs["fsdp"])
    steps = [step for step in after if "train/loss" in after[step]]
    assert steps == list(range(6, 12)), steps
    assert all(after[step]["train/loss"] == losses[step]["train/loss"] for step in steps)


@pytest.mark.slow
def test_mode_eval_reads_a_sharded_runs_checkpoint(full_runs, data_root, tmp_path):
    """mode=eval measures the fsdp run's last.ckpt in one process, with that run's own config: the same figures
    as the ddp run's checkpoint (the same training)."""
    reports = {}
    for name in ("fsdp", "ddp"):
        ckpt = full_runs[name] / "checkpoints" / "last.ckpt"
        cfg = compose_config(["mode=eval", f"ckpt_path={ckpt}", "mode.samples=0"], tmp_path / name, data_root)
        assert perform(cfg)["status"] == "DONE"
        reports[name] = json.loads((tmp_path / name / "eval.json").read_text())
    assert reports["fsdp"]["checkpoint"] == str(full_runs["fsdp"] / "checkpoints" / "last.ckpt")
    assert reports["fsdp"]["loss"] == pytest.approx(reports["ddp"]["loss"], rel=1e-4), reports
    assert reports["fsdp"]["tokens"] == reports["ddp"]["tokens"] > 0


COLLECTIVES = textwrap.dedent('''
    """Two ranks, a sharded GPT; how many collectives the guard and the probes start at each step, as JSON."""
    import json, sys

    import pytorch_lightning as pl
    import torch
    import torch.distributed
    from torch.utils.data import DataLoader

    import harness.train.distributed.shard_sums as whole
    from harness.models import GPT
    from harness.probes import ProbeSet
    from harness.probes.layers.dead import DeadGradients
    from harness.probes.layers.histograms import Histograms
    from harness.probes.layers.norms import ParameterNorms
    from harness.train.module import HarnessModule
    from harness.train.nonfinite import NonFiniteGuard
    from harness.train.distributed.sharding import FSDP


    class Counted:
        """torch.distributed as harness.train.distributed.shard_sums sees it, its all_reduce and all_gather counted."""

        def __init__(self):
            self.calls = 0

        def __getattr__(self, name):
            found = getattr(torch.distributed, name)
            if name not in ("all_reduce", "all_gather"):
                return found

            def counted(*args, **kwargs):
                self.calls += 1
                tensor = args[0] if name == "all_reduce" else args[1]
                assert tensor.is_contiguous(), f"{name} of a tensor that is not contiguous: NCCL refuses it"
                return found(*args, **kwargs)

            return counted


    class PerStep(pl.Callback):
        def __init__(self, counter):
            self.counter, self.steps = counter, []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.start = self.counter.calls

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.steps.append(self.counter.calls - self.start)


    def example(i):
        ids = torch.tensor([i + 1, 2, 3, 4, 5, 6])
        return {"input_ids": ids, "targets": (ids * (i + 2)) % 9, "loss_mask": torch.ones(6, dtype=torch.bool)}


    if __name__ == "__main__":
        whole.dist = counter = Counted()
        torch.manual_seed(0)
        module = HarnessModule(GPT(vocab_size=9, max_len=6, d_model=16, layers=4, heads=2))
        probes = ProbeSet([ParameterNorms(every=1, ratio_every=2, weight_every=2), DeadGradients(every=1),
                           Histograms(every=2)])
        per_step = PerStep(counter)
        trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=FSDP(), max_steps=4, logger=False,
                             callbacks=[NonFiniteGuard(), probes, per_step], enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(module, DataLoader([example(0), example(1)] * 4, batch_size=2))
        if trainer.is_global_zero:
            tensors = len(list(module.parameters()))
            json.dump({"steps": per_step.steps, "tensors": tensors}, open(sys.argv[1], "w"))
''')


@needs_probes
@pytest.mark.slow  # two processes
def test_the_probes_reduce_once_a_logging_step_not_once_a_tensor(tmp_path):
    """The guard's gradient norms (every step), the weight norms and update ratios (one reduction), the
    histograms' statistics (one gather, and one sum of the float64 sums of the tensors whose float32 sums cancel):
    a handful of collectives a step, however many tensors the model has."""
    script, out = tmp_path / "collectives.py", tmp_path / "collectives.json"
    script.write_text(COLLECTIVES)
    result = run_command(sys.executable, str(script), str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    counted = json.loads(out.read_text())
    assert counted["tensors"] > 20, counted
    # the step's token count (harness.train.step_loss) + guard every step; + the weight norms and update ratios,
    # the histograms' gather and their LayerNorm gains' float64 sums on even steps (no tracker: no buckets to sum)
    assert counted["steps"] == [5, 2, 5, 2], counted
