"""Sweeps: real `train.py -m` runs with the real launchers, their summary read back from the sweep dir, and
the known result of the vanishing-gradients preset at initialization."""

from __future__ import annotations

import csv
import itertools
import os
import re
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.types import RunMode
from omegaconf import OmegaConf

from harness.cli.overrides import check_overrides
from harness.data.format import is_whole
from harness.report.command import main as report_main
from harness.report.summary import COLUMNS, EXTRA, collect, write_summary
from harness.report.verdict import read_verdict
from harness.seeding import seed_all
from harness.tasks.training import build
from harness.tasks.validate import validate
from tests.conftest import CONF, PROBES_OFF, ROOT, needs_probes, train

PNGS = ("grad_by_position.png", "reach.png", "loss.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def read_summary(sweep: Path) -> list[dict]:
    with open(sweep / "summary.csv", newline="") as f:
        return list(csv.DictReader(f))


def assert_plots(sweep: Path) -> None:
    for name in PNGS:
        path = sweep / name
        assert path.is_file() and path.read_bytes()[:8] == PNG_MAGIC, f"{path} is not a PNG"
        assert path.stat().st_size > 5000, f"{path} is nearly empty ({path.stat().st_size} bytes)"


def log_span(job_dir: Path) -> tuple[datetime, datetime]:
    """First and last timestamp of a job's train.log: when it ran."""
    stamps = re.findall(
        r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", (job_dir / "train.log").read_text(), re.M
    )
    first, last = (datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f") for s in (stamps[0], stamps[-1]))
    return first, last


# --- the known result, at initialization ---------------------------------------------------------------------


def init_reach(make_config, model: str, length: int) -> float:
    """Gradient reach of the built-in `model` at initialization, built as train.py builds it (the real configs,
    harness.tasks.training's order), on the first 4 validation examples of the first_token data of `length` (the
    grad_by_position probe also measures on 4 examples)."""
    position = pytest.importorskip("harness.probes.tokens.reach", reason="a fork without src/harness/probes/")
    cfg = make_config(
        f"model={model}", f"data.length={length}", "data.rule=first_token", "mode=full", "data.batch_size=4"
    )
    # as run() does: subnormals would make the RNN's backward crawl
    torch.set_flush_denormal(bool(cfg.flush_denormal))
    seed_all(cfg.seed)
    data = build(cfg.data, "data")
    data.prepare_data()
    data.setup("fit")
    net = build(cfg.model, "model", vocab_size=data.tokenizer.vocab_size)
    batch = next(iter(data.val_dataloader()))
    norms = position.input_grad_by_position(net, batch)
    assert norms.dtype == torch.float32 and norms.shape == (length,)
    return position.reach(norms.tolist())


def test_tanh_rnn_reach_vanishes_with_length_the_transformers_does_not(make_config):
    """At init the tanh RNN's reach falls by orders of magnitude from length 10 to 50 and underflows to exactly
    0 in float32 at 200; the transformer's stays within a factor of 10 of 1 at every length."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 4 examples: a second thread only adds waiting, badly so on a busy machine
    try:
        rnn = {length: init_reach(make_config, "rnn", length) for length in (10, 50, 200)}
        transformer = {length: init_reach(make_config, "transformer", length) for length in (10, 50, 200)}
    finally:
        torch.set_num_threads(threads)
    assert 1e-6 < rnn[10] < 0.1, rnn
    assert 0 < rnn[50] < 1e-6 * rnn[10], f"from length 10 to 50 the reach should fall >= 6 orders: {rnn}"
    assert rnn[200] == 0.0, f"at length 200 the first position's gradient should underflow to 0: {rnn}"
    assert all(0.1 <= r <= 10 for r in transformer.values()), (
        f"attention keeps the reach near 1: {transformer}"
    )


# --- presets and launchers compose -----------------------------------------------------------------------------


def sweep_jobs(preset: str) -> list[list[str]]:
    """The overrides of every job the preset's hydra.sweeper.params expands to."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        hydra = compose(
            config_name="train", overrides=[f"experiment={preset}"], return_hydra_config=True
        ).hydra
    assert hydra.mode == RunMode.MULTIRUN, f"{preset} should sweep even without -m"
    params = OmegaConf.to_container(hydra.sweeper.params)
    axes = [[f"{key}={value}" for value in str(values).split(",")] for key, values in params.items()]
    return [list(job) for job in itertools.product(*axes)]


def test_vanishing_gradients_preset_expands_to_nine_valid_jobs(make_config):
    jobs = sweep_jobs("vanishing_gradients")
    assert sorted(tuple(sorted(j)) for j in jobs) == sorted(
        tuple(sorted((f"model={m}", f"data.length={n}")))
        for m in ("rnn", "lstm", "transformer")
        for n in (10, 50, 200)
    )
    for job in jobs:
        cfg = make_config("experiment=vanishing_gradients", *job)
        validate(cfg)
        assert cfg.data.rule == "first_token" and cfg.mode.name == "full" and cfg.mode.max_steps <= 500
        model = dict(override.split("=") for override in job)["model"]
        assert cfg.model._target_.rsplit(".", 1)[1].lower() == model  # RNN, LSTM, Transformer


def test_overfit_ladder_and_text_lm_presets(make_config):
    assert sweep_jobs("overfit_ladder") == [["n=1"], ["n=2"], ["n=5"]]
    for n in (1, 2, 5):
        cfg = make_config("experiment=overfit_ladder", f"n={n}")
        validate(cfg)
        assert cfg.mode.name == "overfit" and cfg.n == n
    cfg = make_config("experiment=text_lm")
    validate(cfg)
    assert (
        cfg.data._target_.endswith("TextDataModule")
        and cfg.mode.name == "full"
        and cfg.mode.max_steps <= 2000
    )


def compose_launcher(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        return compose(
            config_name="train", overrides=list(overrides), return_hydra_config=True
        ).hydra.launcher


def test_launchers_extend_the_plugins_configs():
    parallel = compose_launcher("hydra/launcher=parallel", "hydra.launcher.n_jobs=3")
    assert (
        parallel._target_.endswith("JoblibLauncher")
        and parallel.n_jobs == 3
        and parallel.prefer == "processes"
    )
    local = compose_launcher("hydra/launcher=local")
    assert local._target_.endswith("submitit_launcher.LocalLauncher") and local.timeout_min == 60
    slurm = compose_launcher("hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.nodes=2")
    assert slurm._target_.endswith("SlurmLauncher")
    assert (slurm.partition, slurm.nodes, slurm.gpus_per_node, slurm.timeout_min) == ("gpu", 2, 1, 60)
    with pytest.raises(Exception, match="n_jobz"):  # the plugin's schema came along: a typo is refused
        compose_launcher("hydra/launcher=parallel", "hydra.launcher.n_jobz=3")
    with pytest.raises(Exception, match="gpus_per_node"):
        compose_launcher("hydra/launcher=slurm", "hydra.launcher.gpus_per_node=two")


# --- a real sweep and its summary ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory, data_root) -> Path:
    """A real basic-launcher sweep of two jobs, the second a user mistake only found inside the job (more examples
    to overfit than its data holds: the door, which builds no data, cannot see it)."""
    cwd = tmp_path_factory.mktemp("failing_sweep")
    result = train(
        "-m",
        "n=1,5000",
        "data.rule=first_token",
        "data.length=12",
        "mode.max_steps=3",
        "preflight=false",
        cwd=cwd,
        data_root=data_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd / "sweep"


@pytest.mark.slow  # its sweep (failing_sweep): two train.py jobs, ~12 s
@needs_probes
def test_failed_job_is_marked_and_the_others_kept(failing_sweep):
    rows = read_summary(failing_sweep)
    assert list(rows[0])[: len(COLUMNS)] == list(COLUMNS) and {"n", "job", "error"} <= set(rows[0])
    good, bad = sorted(rows, key=lambda r: r["job"])
    assert (good["model"], good["length"], good["rule"], good["steps"]) == (
        "Transformer",
        "12",
        "first_token",
        "3",
    )
    assert good["status"] in ("PASS", "FAIL") and float(good["final_loss"]) > 0 and good["error"] == ""
    verdict = read_verdict(failing_sweep / good["job"])
    assert float(good["reach_init"]) == pytest.approx(verdict["reach_init"], rel=1e-5), (
        "the probe's reach, read back"
    )
    assert (bad["status"], bad["model"], bad["length"], bad["rule"], bad["n"]) == (
        "ERROR",
        "Transformer",
        "12",
        "first_token",
        "5000",
    )
    assert bad["error"].startswith("n=5000: the training split has only") and bad["final_loss"] == ""
    md = (failing_sweep / "summary.md").read_text()
    assert (
        "| model | length | rule | status | final_loss | accuracy | steps | reach_init | reach_final |" in md
    )
    assert "| ERROR |" in md and "n=5000" in md and "1 ERROR" in md
    assert_plots(failing_sweep)


@pytest.mark.slow  # reads failing_sweep's dirs
@needs_probes
def test_report_rebuilds_the_summary_from_the_job_dirs(failing_sweep, tmp_path, capsys):
    """python -m harness.report SWEEP_DIR (its main(), in-process: the start-up of another Python costs seconds)."""
    before = (failing_sweep / "summary.csv").read_text()
    for name in ("summary.csv", "summary.md", *PNGS):
        (failing_sweep / name).unlink()
    assert report_main([str(failing_sweep)]) == 0
    assert (failing_sweep / "summary.csv").read_text() == before
    assert "| ERROR |" in capsys.readouterr().out
    assert_plots(failing_sweep)
    for bad in (tmp_path / "nope", tmp_path):  # no such dir; a dir without job dirs
        assert report_main([str(bad)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {bad}:"), lines


@pytest.mark.slow  # reads failing_sweep's dirs
def test_summary_of_a_job_that_died_without_a_verdict(failing_sweep, tmp_path):
    """A job killed before writing verdict.json (OOM, a cluster timeout) is still a row: MISSING, with its model."""
    import shutil

    sweep = tmp_path / "sweep"
    shutil.copytree(failing_sweep, sweep)
    (sweep / "0" / "verdict.json").unlink()
    rows = {job.row["job"]: job.row for job in collect(sweep)}
    assert (
        rows["0"]["status"] == "MISSING" and rows["0"]["model"] == "Transformer" and rows["0"]["length"] == 12
    )
    assert "no verdict.json" in rows["0"]["error"] and rows["1"]["status"] == "ERROR"
    write_summary(sweep, plots=False)
    assert "| MISSING |" in (sweep / "summary.md").read_text()


def test_underflow_is_written_as_zero_and_drawn(tmp_path):
    """reach 0.0 (an underflow) is the finding: written 0, not left empty, and drawn on the axis floor."""
    from harness.report.plots import reach_by_length
    from harness.report.summary import Job, write_csv

    def job(length: int, reach_init: float | None) -> Job:
        row = dict.fromkeys(COLUMNS + EXTRA)
        row.update(model="rnn", length=length, status="DONE", reach_init=reach_init, job=str(length))
        return Job(row=row)

    jobs = [job(10, 1.5e-3), job(50, 1.6e-17), job(200, 0.0), job(400, None)]
    rows = list(csv.DictReader(write_csv(jobs, tmp_path / "summary.csv").open()))
    assert [r["reach_init"] for r in rows] == ["0.0015", "1.6e-17", "0", ""]
    with_zero, without = (
        reach_by_length(jobs, tmp_path / "zero.png"),
        reach_by_length(jobs[:2], tmp_path / "no.png"),
    )
    assert with_zero.read_bytes()[:8] == PNG_MAGIC
    assert with_zero.read_bytes() != without.read_bytes(), "the zero should be drawn, not dropped"


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
        assert verdicts[j]["status"] == "ERROR" and verdicts[j]["error"].startswith("n=50000"), verdicts[j]
        log = (sweep / j / "train.log").read_text()
        assert "error: n=50000" in log and "Traceback" not in log, log
    for j in "0123":  # HydraConfig in the worker: the job's own number, dir and mode
        hydra = OmegaConf.load(sweep / j / ".hydra" / "hydra.yaml").hydra
        assert (str(hydra.job.num), hydra.mode, Path(hydra.runtime.output_dir)) == (j, "MULTIRUN", sweep / j)
    for j in "01":  # logging in the worker: each job's lines land in its own train.log
        assert f"verdict: {sweep / j}/verdict.json" in (sweep / j / "train.log").read_text()
    datasets = list((root / "synthetic").iterdir())
    assert len(datasets) == 1 and is_whole(datasets[0]), (
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


def test_summary_is_importable_without_matplotlib_or_torch_cost():
    """Hydra instantiates the callback for every run (single runs too): importing it must stay cheap."""
    code = "import sys, harness.report.summary; print(sorted(m for m in ('matplotlib', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


UNREADABLE_JOBS = {
    "a_list": ("verdict.json", "[1, 2]", "not a verdict (holds a JSON list, not an object)"),
    "status_a_number": ("verdict.json", '{"status": 5}', "not a verdict (status is int '5', not str)"),
    "steps_a_string": ("verdict.json", '{"status": "DONE", "steps": "many"}', "not a verdict (steps is str"),
    "symptoms_not_a_list": ("verdict.json", '{"status": "DONE", "symptoms": "x"}', "symptoms is str"),
    "symptom_without_name": (
        "verdict.json",
        '{"status": "DONE", "symptoms": [{}]}',
        "symptoms must be a list",
    ),
    "grads_not_lists": (
        "verdict.json",
        '{"status": "DONE", "grad_by_position": {"init": 3}}',
        "grad_by_position",
    ),
    "config_damaged": (".hydra/config.yaml", "mode: {name: [full", "config.yaml: not readable YAML"),
    "config_a_list": (".hydra/config.yaml", "- 1\n- 2\n", "config.yaml: holds a YAML list"),
    "hydra_damaged": (".hydra/hydra.yaml", "hydra: [", "hydra.yaml: not readable YAML"),
}


def test_report_marks_a_job_it_cannot_read_and_summarizes_the_rest(tmp_path):
    """python -m harness.report on a sweep whose job dirs hold a verdict.json of the wrong shape or a damaged
    .hydra/ file: each such job is one row saying why, as invalid JSON was; it crashed instead."""
    sweep = tmp_path / "sweep"
    good = '{"status": "DONE", "mode": "full", "final_loss": 1.5, "steps": 3}'
    names = ["good", *UNREADABLE_JOBS]
    for job, name in enumerate(names):
        (sweep / str(job) / ".hydra").mkdir(parents=True)
        (sweep / str(job) / "verdict.json").write_text(good)
        (sweep / str(job) / ".hydra" / "config.yaml").write_text("mode: {name: full}\nseed: 0\n")
        if name in UNREADABLE_JOBS:
            file, text, _ = UNREADABLE_JOBS[name]
            (sweep / str(job) / file).write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "harness.report", str(sweep)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    with open(sweep / "summary.csv") as f:
        rows = {names[int(r["job"])]: r for r in csv.DictReader(f)}
    assert set(rows) == set(names) and rows["good"]["status"] == "DONE" and not rows["good"]["error"]
    for name, (_, _, said) in UNREADABLE_JOBS.items():
        assert said in rows[name]["error"], (name, rows[name])
    assert rows["config_damaged"]["status"] == "DONE", "the verdict is read: only the config is not"


def test_verdict_json_has_one_reader_that_keeps_a_status_its_other_fields_cannot_spoil(tmp_path):
    """harness.report.verdict reads verdict.json for every part: the summary gets why a file is no verdict, the
    run-dir check and resuming get the status, which a probe's field of another shape does not hide."""
    from harness.report.verdict import status_in, verdict_in

    cases = {
        "none": (None, None, ""),
        "damaged": ("{", None, "not valid JSON"),
        "odd_field": (
            '{"status": "INTERRUPTED", "steps": "many"}',
            "INTERRUPTED",
            "not a verdict (steps is str",
        ),
        "a_list": ("[1]", "?", "holds a JSON list"),
        "whole": ('{"status": "PASS", "steps": 3}', "PASS", ""),
    }
    for name, (text, status, why) in cases.items():
        (tmp_path / name).mkdir()
        if text is not None:
            (tmp_path / name / "verdict.json").write_text(text)
        values, reason = verdict_in(tmp_path / name)
        assert status_in(tmp_path / name) == (status if text != "{" else "?"), name
        assert why in reason and (values is not None) == (name == "whole"), (name, values, reason)
