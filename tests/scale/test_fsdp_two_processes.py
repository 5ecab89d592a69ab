"""Sharded training on two real processes on this CPU (gloo): the probes report the whole layers, under the
model's own names, as one process does; meta init, two torchrun nodes, activation checkpointing, a nonfinite
gradient and bf16 under sharding. The two-process runs cost seconds each: they are in the slow tier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import (
    PROBES_OFF,
    ROOT,
    needs_probes,
    torchrun_nodes,
    train,
)
from tests.scale.conftest import EVERY_STEP, SHORT, metrics, mismatches

# --- two processes, one run ---------------------------------------------------------------------------------------


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
    args = [
        "mode=overfit",
        "n=2",
        "model=gpt",
        "model._target_=tests.forks.sick_models.LoudGPT",
        "trainer=fsdp",
    ]
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
    step, skips its update and names the module (a forward run by every rank, in step)."""
    args = [
        "mode=overfit",
        "n=2",
        "trainer=fsdp",
        "model=rnn",
        "model._target_=tests.forks.models.ExplodingGRU",
    ]
    result = train(*args, "preflight=false", *PROBES_OFF, "data.length=12", cwd=tmp_path, data_root=data_root)
    assert result.returncode == 4, result.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "NONFINITE" and "blowup" in verdict["nonfinite"]["where"], verdict
    # the fused step skipped its update on the device; its flag read at that step's end (overfit mode logs each)
    assert verdict["nonfinite"]["step"] + 1 == verdict["steps"], verdict


@pytest.mark.slow
def test_a_nan_in_one_ranks_slice_alone_stops_every_rank(tmp_path, data_root):
    """NaNInOneRow: only rank 1's slice of `trap`'s gradient is NaN. Judged on its own slice, rank 0 would step on
    while rank 1 stopped, and wait for it forever (the timeout turns that into a failure); judged on the whole
    gradient, both stop at step 0."""
    args = ["mode=overfit", "n=2", "trainer=fsdp", "model._target_=tests.forks.sick_models.NaNInOneRow"]
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
