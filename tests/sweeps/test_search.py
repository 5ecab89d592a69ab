"""Hyperparameter search with Optuna: the preset composes, each job hands its optimized_metric to the sweeper, a
real `train.py -m experiment=search` writes Optuna's results beside the sweep summary."""

from __future__ import annotations

import csv
import math

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf, read_write

from harness.cli.overrides import check_overrides
from harness.errors import ConfigError
from harness.report.verdict import read_verdict
from harness.tasks.job import job
from harness.tasks.validate import validate
from tests.conftest import CONF, PROBES_OFF

TINY = [
    "mode=full",
    "mode.max_steps=4",
    "mode.val_every=2",
    "mode.log_every=1",
    "data.size=32",
    "data.batch_size=8",
    "data.length=8",
    "preflight=false",
    *PROBES_OFF,
]


def as_sweep_job(cfg):
    """The config as a job of a sweep sees it (HydraConfig's mode MULTIRUN): job() returns instead of exiting."""
    with read_write(cfg.hydra):
        cfg.hydra.mode = RunMode.MULTIRUN
    HydraConfig.instance().set_config(cfg)
    return cfg


def test_search_preset_composes_an_optuna_sweep(make_config):
    cfg = make_config("experiment=search")
    validate(cfg)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and cfg.hydra.mode == RunMode.MULTIRUN
    assert set(sweeper.params) == {"optim.lr", "model.d_model"} and sweeper.direction == "minimize"
    assert cfg.optimized_metric == "val_loss" and cfg.mode.name == "full"


def test_a_sweep_job_returns_its_optimized_metric(make_config, tmp_path):
    """What Optuna reads from each job: the number optimized_metric names, from verdict.json or the last value of
    that metrics.csv column; None where the job has no such number (Optuna records a failed trial and goes on,
    where a NaN would stop the whole sweep: optuna 2.10 refuses it)."""
    from harness.report.optimized_metric import metric_value

    run_dir = tmp_path / "job"
    value = job(as_sweep_job(make_config(*TINY, "optimized_metric=val_loss", run_dir=run_dir)))
    verdict = read_verdict(run_dir)
    assert isinstance(value, float) and math.isfinite(value) and value == verdict["val_loss"], (
        value,
        verdict,
    )
    assert metric_value(verdict, "final_loss", run_dir) == verdict["final_loss"]
    with open(run_dir / "metrics.csv", newline="") as f:
        logged = [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]
    assert len(logged) == 2 and metric_value(verdict, "val/loss", run_dir) == logged[-1]
    assert logged[-1] == pytest.approx(value, rel=1e-6), "the last validation is the verdict's"
    # a full run has no eval_loss (overfit mode's) and no column val/nope
    assert (
        metric_value(verdict, "eval_loss", run_dir) is None
        and metric_value(verdict, "val/nope", run_dir) is None
    )
    assert metric_value({"val_loss": "nan"}, "val_loss", run_dir) is None, "a NaN (as verdict.json stores it)"


def test_without_optimized_metric_a_sweep_job_returns_its_verdict(make_config, tmp_path):
    value = job(as_sweep_job(make_config(*TINY, "mode.max_steps=2", run_dir=tmp_path / "job")))
    assert isinstance(value, dict) and value["status"] == "DONE"


def test_optimized_metric_must_name_a_number(make_config):
    with pytest.raises(ConfigError, match=r"^optimized_metric=status: choose a number of verdict.json"):
        validate(make_config("optimized_metric=status"))


def test_optuna_without_a_metric_is_refused_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        check_overrides(["-m", "hydra/sweeper=optuna", "optim.lr=interval(1e-4,1e-2)"], CONF)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("error: optimized_metric=None: hydra/sweeper=optuna optimizes the number")
    # Optuna's interval syntax on the command line is checked by its two ends, and passes with a metric
    # (val_loss: a mode=full run's; overfit mode never sets it)
    check_overrides(
        [
            "-m",
            "hydra/sweeper=optuna",
            "mode=full",
            "optimized_metric=val_loss",
            "optim.lr=interval(1e-4,1e-2)",
        ],
        CONF,
    )


@pytest.mark.slow  # a real 3-trial Optuna sweep: ~13 s
def test_search_sweep_writes_optuna_results_and_the_summary(run_train, tmp_path):
    """A real `train.py -m experiment=search` of 3 tiny trials: optimization_results.yaml holds the best of
    them, summary.csv a row each."""
    result = run_train(
        "-m",
        "experiment=search",
        "hydra.sweeper.n_trials=3",
        *TINY,
        "mode.max_steps=6",
        "mode.val_every=3",
        "model.layers=1",
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "sweep"
    best = OmegaConf.load(sweep / "optimization_results.yaml")
    assert best.name == "optuna" and set(best.best_params) == {"optim.lr", "model.d_model"}, best
    assert 1e-4 <= best.best_params["optim.lr"] <= 3e-2 and best.best_params["model.d_model"] in (32, 64, 128)
    with open(sweep / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and all(r["status"] == "DONE" for r in rows), rows
    losses = [read_verdict(sweep / r["job"])["val_loss"] for r in rows]
    assert best.best_value == pytest.approx(min(losses)), (best.best_value, losses)
    lrs = {OmegaConf.load(sweep / r["job"] / ".hydra/config.yaml").optim.lr for r in rows}
    assert len(lrs) == 3, f"each trial its own learning rate: {lrs}"


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            ["optimized_metric=val_loss"],
            "optimized_metric=val_loss: mode=overfit never sets it in verdict.json",
        ),
        (["mode=full", "optimized_metric=eval_loss"], "optimized_metric=eval_loss: mode=full never sets it"),
        (
            ["mode=full", "optimized_metric=val/los"],
            "optimized_metric=val/los: metrics.csv has no such column",
        ),
        (["optimized_metric=train/lss"], "optimized_metric=train/lss: metrics.csv has no such column"),
    ],
)
def test_a_metric_no_job_can_return_is_refused_at_the_door(overrides, line, capsys, tmp_path, monkeypatch):
    """Each trial of such a search failed, and the sweep ended in Optuna's "No trials are completed yet"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        check_overrides(["-m", "hydra/sweeper=optuna", "optim.lr=interval(1e-4,1e-2)", *overrides], CONF)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {line}"), err
    # a column the harness does not know may be a probe's or a fork's: read when the jobs end
    check_overrides(["-m", "hydra/sweeper=optuna", "mode=full", "optimized_metric=mine/score", "n=1"], CONF)


@pytest.mark.slow  # a real 2-trial Optuna sweep: ~15 s
def test_a_search_whose_metric_no_job_logs_writes_the_summary_and_one_line(run_train, tmp_path):
    """It ended in `ValueError: No trials are completed yet` and wrote no summary."""
    result = run_train(
        "-m",
        "experiment=search",
        "hydra.sweeper.n_trials=2",
        *TINY,
        "optimized_metric=mine/score",
        timeout=240,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith("error: optimized_metric=mine/score: no trial returned it (2 trials: DONE)")
    assert "Traceback" not in result.stdout + result.stderr and "No trials are completed" not in result.stderr
    with open(tmp_path / "sweep" / "summary.csv", newline="") as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["DONE", "DONE"]
    assert not (tmp_path / "sweep" / "optimization_results.yaml").exists()
