"""(slow) Launchers end to end, each a real `train.py -m` with its own start-up: joblib in parallel on one fresh
data root, submitit locally, a W&B run for each job, and the SLURM launcher as the docs show it."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.cli.overrides import check_overrides
from harness.data.format import is_complete
from harness.report.verdict import read_verdict
from tests.conftest import CONF, PROBES_OFF, ROOT, train
from tests.sweeps.conftest import assert_plots, log_span, read_summary

# --- launchers end to end (slow: each is a real train.py -m with its own start-up) -------------------------------


@pytest.mark.slow
def test_joblib_jobs_run_in_parallel_on_one_fresh_data_root(tmp_path):
    """Two workers; the first two jobs need the same (large) synthetic dataset, which none has yet. The dataset is
    generated once, whole; the jobs overlap in time; a job's error (more examples than the data holds: seen only
    once the data is) stays one line in its own log."""
    root = tmp_path / "fresh_data"
    result = train(
        "-m",
        "hydra/launcher=parallel",
        "hydra.launcher.n_jobs=2",
        "n=1,50000",
        "model=rnn,transformer",
        "data.length=64",
        "data.size=20000",
        "mode.max_steps=200",  # with no target to stop at (0 above the floor), a job lasts longer than a
        "mode.target_loss=0",  # worker takes to start: the two must overlap
        "preflight=false",
        cwd=tmp_path,
        data_root=root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "sweep"
    assert "Joblib.Parallel(n_jobs=2" in result.stdout + result.stderr
    verdicts = {d.name: read_verdict(d) for d in sorted(sweep.iterdir()) if (d / "verdict.json").exists()}
    assert sorted(verdicts) == ["0", "1", "2", "3"]
    assert [verdicts[j]["model"] for j in "01"] == ["RNN", "Transformer"]
    assert [verdicts[j]["model_group"] for j in "01"] == ["rnn", "transformer"]
    assert all(verdicts[j]["status"] in ("PASS", "FAIL") for j in "01"), verdicts
    for j in "23":
        assert verdicts[j]["status"] == "CONFIG_ERROR" and verdicts[j]["error"].startswith("n=50000"), (
            verdicts[j]
        )
        log = (sweep / j / "train.log").read_text()
        assert "error: n=50000" in log and "Traceback" not in log, log
    for j in "0123":  # HydraConfig in the worker: the job's own number, dir and mode
        hydra = OmegaConf.load(sweep / j / ".hydra" / "hydra.yaml").hydra
        assert (str(hydra.job.num), hydra.mode, Path(hydra.runtime.output_dir)) == (j, "MULTIRUN", sweep / j)
    for j in "01":  # logging in the worker: each job's lines land in its own train.log
        assert f"verdict: {sweep / j}/verdict.json" in (sweep / j / "train.log").read_text()
    datasets = list((root / "synthetic").iterdir())
    assert len(datasets) == 1 and is_complete(datasets[0]), (
        f"one whole dataset, no staging leftovers: {datasets}"
    )
    (start0, end0), (start1, end1) = log_span(sweep / "0"), log_span(sweep / "1")
    assert start0 < end1 and start1 < end0, "the two workers should have run jobs 0 and 1 at the same time"
    assert [r["status"] for r in read_summary(sweep)] == [verdicts[j]["status"] for j in "0213"]
    assert_plots(sweep)


@pytest.mark.slow
def test_submitit_local_sweep_summarized_after_every_job(tmp_path, data_root):
    result = train(
        "-m",
        "hydra/launcher=local",
        "data.length=10,20",
        "n=1",
        "mode.max_steps=3",
        "preflight=false",
        cwd=tmp_path,
        data_root=data_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "sweep"
    assert (sweep / ".submitit").is_dir(), "the jobs should have gone through submitit"
    verdicts = [sweep / j / "verdict.json" for j in "01"]
    assert [read_verdict(v.parent)["length"] for v in verdicts] == [10, 20]
    rows = read_summary(sweep)
    assert [(r["length"], r["status"]) for r in rows] == [
        ("10", read_verdict(sweep / "0")["status"]),
        ("20", read_verdict(sweep / "1")["status"]),
    ]
    # on_multirun_end ran in the launching process, after the last job wrote its verdict
    assert (sweep / "summary.md").stat().st_mtime >= max(v.stat().st_mtime for v in verdicts)
    assert "sweep summary of 2 jobs" in result.stdout + result.stderr
    assert_plots(sweep)


@pytest.mark.slow
def test_each_job_has_its_own_finished_wandb_run(tmp_path, data_root):
    """Jobs of a basic sweep share one process: an unfinished wandb run would be reused by the next job."""
    result = train(
        "-m",
        "logger=wandb",
        "data.length=10,12",
        "n=1",
        "mode.max_steps=3",
        "preflight=false",
        *PROBES_OFF,
        cwd=tmp_path,
        data_root=data_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ids = []
    for j in "01":
        wandb_dir = tmp_path / "sweep" / j / "wandb"
        runs = sorted(wandb_dir.glob("offline-run-*"))
        assert len(runs) == 1, f"job {j} should hold exactly its own wandb run: {runs}"
        run_id = runs[0].name.rsplit("-", 1)[1]
        assert (runs[0] / f"run-{run_id}.wandb").is_file()
        assert f"finishing run harness/{run_id}" in (wandb_dir / "debug.log").read_text(), (
            "the run was not finished"
        )
        ids.append(run_id)
    assert ids[0] != ids[1]


def documented_command(heading: str, page: str = "docs/scaling.md") -> list[str]:
    """The overrides of the first `python train.py ...` code block after `heading` in `page`."""
    text = (ROOT / page).read_text()
    block = text[text.index(heading) :].split("```")[1]
    return shlex.split(block.replace("\\\n", " "))[2:]  # past "python train.py"


@pytest.mark.slow
def test_documented_slurm_example_composes_to_what_it_says():
    args = documented_command("## A sweep on a SLURM cluster")
    assert args[0] == "-m" and "data.length=10,50,200" in args, args
    check_overrides(args, CONF)  # the command line's own check of every job, before anything is queued
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        job = [a for a in args[1:] if not a.startswith("data.length=")]
        cfg = compose(config_name="train", overrides=job, return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher"), launcher._target_
    assert (launcher.partition, launcher.timeout_min, launcher.nodes) == ("gpu", 120, 1)
    assert (launcher.gpus_per_node, launcher.tasks_per_node, list(launcher.setup)) == (
        4,
        4,
        ["source .venv/bin/activate"],
    )
    assert (cfg.trainer.strategy, cfg.trainer.devices, cfg.trainer.precision) == ("ddp", 4, "bf16-mixed")


@pytest.mark.slow
def test_slurm_launcher_asks_for_the_configured_resources(tmp_path, data_root):
    """No cluster here: a stand-in `sbatch` keeps the script submitit hands it, then refuses the job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(
        f'#!/bin/sh\nfor a in "$@"; do case "$a" in *.sh) cp "$a" {tmp_path}/submitted.sh;; esac; done\n'
        'echo "sbatch: error: no cluster here" >&2\nexit 1\n'
    )
    sbatch.chmod(0o755)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit only checks that srun exists
    (bin_dir / "srun").chmod(0o755)
    result = train(
        "-m",
        "hydra/launcher=slurm",
        "hydra.launcher.partition=debug",
        "hydra.launcher.nodes=2",
        "hydra.launcher.gpus_per_node=4",
        "hydra.launcher.tasks_per_node=4",  # one DDP rank a GPU: 8 ranks over 2 machines
        "hydra.launcher.timeout_min=30",
        "trainer=ddp",
        "trainer.accelerator=gpu",  # no GPU here: the job counts its devices where it runs
        "trainer.devices=4",
        "trainer.num_nodes=2",
        "data.length=10,20",
        cwd=tmp_path,
        data_root=data_root,
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    assert result.returncode != 0  # the stand-in refused the job
    script = (tmp_path / "submitted.sh").read_text()
    for line in (
        "#SBATCH --partition=debug",
        "#SBATCH --nodes=2",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --time=30",
        "#SBATCH --array=0-1",
    ):
        assert line in script, f"{line!r} not in the sbatch script:\n{script}"
