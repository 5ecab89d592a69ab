"""DDP on CPU (gloo): two real processes, one run dir, the gradient probe seeing the all-reduced gradient,
mode=full with checkpoints, ranks stopping together on a signal, and the first process alone writing.

The DDP tests start real processes (Lightning restarts the script for rank 1), so they cost seconds each."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.conftest import PROBES_OFF, needs_probes, start_train, train, wait_for_steps

# --- DDP: two processes on this CPU, one run --------------------------------------------------------------------


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, data_root) -> tuple[subprocess.CompletedProcess, Path]:
    """`train.py mode=overfit n=2 trainer=ddp` with the default, timestamped run dir: each restarted rank
    would make its own if it computed the timestamp again."""
    cwd = tmp_path_factory.mktemp("ddp")
    result = train(
        "mode=overfit",
        "n=2",
        "trainer=ddp",
        "data.length=12",
        "hydra.run.dir=outputs/runs/${now:%Y-%m-%d}/${now:%H-%M-%S-%f}",
        cwd=cwd,
        data_root=data_root,
    )
    return result, cwd


@pytest.mark.slow  # a whole train.py run of its own (two DDP processes, or compiling)
def test_ddp_overfit_passes_in_one_run_dir(ddp_run):
    result, cwd = ddp_run
    assert result.returncode == 0, result.stderr[-3000:]
    run_dirs = list((cwd / "outputs" / "runs").glob("*/*"))
    assert len(run_dirs) == 1, f"one run, one dir: {run_dirs}"
    assert [p.parent for p in cwd.rglob("verdict.json")] == run_dirs
    verdict = json.loads((run_dirs[0] / "verdict.json").read_text())
    assert verdict["status"] == "PASS" and verdict["accuracy"] == 1.0, verdict
    assert (run_dirs[0] / "train_ddp_process_1.log").is_file(), "rank 1 never started: not a DDP run"


@needs_probes
@pytest.mark.slow  # a whole train.py run of its own (two DDP processes, or compiling)
def test_ddp_rank0_alone_writes_metrics_probes_and_checks(ddp_run):
    result, cwd = ddp_run
    (run_dir,) = (cwd / "outputs" / "runs").glob("*/*")
    verdict = json.loads((run_dir / "verdict.json").read_text())
    with (run_dir / "metrics.csv").open() as f:
        losses = [row for row in csv.DictReader(f) if row["train/loss"]]
    steps = [row["step"] for row in losses]
    assert len(steps) == len(set(steps)) == verdict["steps"], f"a metrics row a step, once: {steps}"
    lines = (run_dir / "datapoints.jsonl").read_text().splitlines()
    assert lines and len(lines) == len(set(lines)), "datapoints written twice"
    assert verdict["checks"] and all(c["status"] == "PASS" for c in verdict["checks"])
    assert verdict["grad_by_position"] and verdict["inputs_identical"] is True
    preflights = {p.name: p.read_text().count("preflight (") for p in run_dir.glob("train*.log")}
    assert preflights == {"train.log": 1, "train_ddp_process_1.log": 0}, preflights


GRADIENTS = textwrap.dedent('''
    """Two DDP ranks, each with its own example; the gradient probe's total norm at step 0 is written as JSON."""
    import copy, csv, json, sys

    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.loggers import CSVLogger
    from torch.utils.data import DataLoader

    from harness.models import RNN
    from harness.train.module import HarnessModule
    from harness.probes import ProbeSet
    from harness.probes.layers.norms import ParameterNorms


    class LocalGradient(pl.Callback):
        """At step 0: this rank's own gradient (a copy of the model, this rank's batch) and the mean over ranks."""

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            model = copy.deepcopy(pl_module.model)
            pl_module.loss(model(batch["input_ids"]), batch["targets"], batch["loss_mask"]).backward()
            local = torch.cat([p.grad.flatten() for p in model.parameters()])
            self.local = local.norm().item()
            self.mean = trainer.strategy.all_gather(local).mean(dim=0).norm().item()  # [ranks, params] -> params


    def example(i):
        ids = torch.tensor([i + 1, 2, 3, 4, 5, 6])
        return {"input_ids": ids, "targets": (ids * (i + 2)) % 9, "loss_mask": torch.ones(6, dtype=torch.bool)}


    if __name__ == "__main__":
        out = sys.argv[1]
        torch.manual_seed(0)
        module = HarnessModule(RNN(vocab_size=9, d_model=8))
        local, probes = LocalGradient(), ProbeSet([ParameterNorms(every=1)])
        trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=1, callbacks=[local, probes],
                             logger=CSVLogger(out, name="", version=""), enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(module, DataLoader([example(0), example(1)], batch_size=1))
        if trainer.is_global_zero:
            with open(f"{out}/metrics.csv") as f:
                seen = next(float(r["grad_norm/total"]) for r in csv.DictReader(f) if r.get("grad_norm/total"))
            json.dump({"probe": seen, "mean_over_ranks": local.mean, "rank0_alone": local.local},
                      open(f"{out}/gradients.json", "w"))
''')


@pytest.mark.slow  # ~10-15 s: a whole train.py run under its own conditions
def test_gradient_probe_sees_the_all_reduced_gradient(tmp_path):
    """Lightning calls on_before_optimizer_step after backward, when DDP's all-reduce has finished: the probe's
    norm is that of the mean gradient over ranks, not of rank 0's own."""
    pytest.importorskip("harness.probes", reason="a fork without src/harness/probes/ has no gradient probe")
    script = tmp_path / "ddp_gradients.py"
    script.write_text(GRADIENTS)
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    norms = json.loads((tmp_path / "gradients.json").read_text())
    assert abs(norms["rank0_alone"] - norms["mean_over_ranks"]) > 1e-2 * norms["mean_over_ranks"], norms
    assert norms["probe"] == pytest.approx(norms["mean_over_ranks"], rel=1e-4), norms


@pytest.mark.slow
def test_ddp_full_mode_trains_and_checkpoints(run_train, tmp_path):
    result = run_train(
        "mode=full",
        "trainer=ddp",
        "data.size=64",
        "data.batch_size=8",
        "mode.max_steps=6",
        "mode.val_every=3",
        "mode.ckpt_every=3",
        *PROBES_OFF,
        "preflight=false",
        "mode.progress_bar=false",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "DONE" and verdict["steps"] == 6 and verdict["val_loss"] is not None, verdict
    assert torch.load(tmp_path / "run/checkpoints/last.ckpt", weights_only=True)["global_step"] == 6


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["ddp", "fsdp"])
def test_ranks_stop_together_on_a_signal_to_rank_0(trainer, tmp_path, data_root):
    """SIGTERM reaches rank 0 only (as `kill <pid>` does): both ranks stop after the same step, rank 0 saves
    the checkpoint and the INTERRUPTED verdict, and rank 1 is not left waiting in an all-reduce (fsdp: nor in
    gathering the consolidated checkpoint, which a save on rank 0 alone would leave waiting forever)."""
    args = [
        "mode=full",
        f"trainer={trainer}",
        "data.size=64",
        "data.batch_size=8",
        "mode.max_steps=100000",
        "mode.log_every=1",
        "mode.val_every=1000",
        *PROBES_OFF,
        "preflight=false",
        "mode.progress_bar=false",
    ]
    process = start_train(f"data.root={data_root}", *args, run_dir=tmp_path / "run", cwd=tmp_path)
    wait_for_steps(tmp_path / "run/metrics.csv", 5, process)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143, (out + err)[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "INTERRUPTED" and verdict["steps"] >= 5, verdict
    assert (
        torch.load(tmp_path / "run/checkpoints/last.ckpt", weights_only=True)["global_step"]
        == verdict["steps"]
    )


@pytest.mark.parametrize(
    ("env", "rank_zero", "launched"),
    [
        ({}, True, False),  # alone
        ({"LOCAL_RANK": "1", "NODE_RANK": "0"}, False, True),  # a rank Lightning started on this machine
        ({"NODE_RANK": "1", "WORLD_SIZE": "4"}, False, False),  # machine 1's first process, started by hand
        ({"LOCAL_RANK": "0", "NODE_RANK": "0"}, True, False),  # rank 0 once Lightning set its variables
        ({"SLURM_PROCID": "2", "LOCAL_RANK": "1"}, False, False),  # SLURM starts every rank itself
        ({"RANK": "0", "LOCAL_RANK": "0"}, True, False),  # torchrun's rank 0
    ],
)
def test_only_the_first_process_writes(env, rank_zero, launched, monkeypatch):
    from harness.ranks import global_rank, started_by_lightning

    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert (global_rank() == 0, started_by_lightning()) == (rank_zero, launched)
