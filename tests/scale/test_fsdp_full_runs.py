"""Sharded runs on two real processes (gloo) that fall ill, train in mode=full, resume and are evaluated: a dead
ReLU and unused parameters named under sharding, each rank its share, a bit-for-bit resume, mode=eval of a
sharded checkpoint, and the probes' collectives once a logging step. Slow: seconds a run."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from harness.tasks.job import perform
from tests.conftest import (
    PROBES_OFF,
    compose_config,
    needs_probes,
    run_command,
    train,
)
from tests.scale.conftest import SHORT, metrics, mismatches

SICK = ["preflight=false", "probes.datapoints=null", "probes.embeddings=null", "mode.target_loss=0"]


@needs_probes
@pytest.mark.slow
def test_a_dead_relu_is_named_under_sharding(tmp_path, data_root):
    result = train(
        "trainer=fsdp",
        "model._target_=tests.forks.sick_models.NegativeBiasReLU",
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
        "model._target_=tests.forks.models.UnusedParamRNN",
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
    args = [
        "trainer=fsdp",
        "model._target_=tests.forks.sick_models.HalfUsed",
        "mode.max_steps=15",
        *SICK,
        *SHORT,
    ]
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
