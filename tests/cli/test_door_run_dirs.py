"""A run directory that holds an earlier run, and a checkpoint of another mode, are refused at the door in one
line, as a bad value is; +overwrite=true replaces an earlier run, on rank 0 alone, and never empties a folder
that holds the working directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.overrides import check_overrides
from harness.errors import ConfigError
from tests.cli.conftest import refused
from tests.conftest import CONF, PROBES_OFF

# -- run directories --------------------------------------------------------------------------------------------


def write_verdict(run_dir: Path, status: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "verdict.json").write_text(json.dumps({"status": status, "mode": "full"}))


def test_a_run_dir_holding_a_verdict_is_refused(capsys, tmp_path):
    run_dir = tmp_path / "earlier"
    write_verdict(run_dir, "DONE")
    message = refused(capsys, f"hydra.run.dir={run_dir}")
    assert message.startswith(f"error: hydra.run.dir={run_dir}: already holds a run (verdict DONE)"), message
    assert "+overwrite=true" in message
    check_overrides([f"hydra.run.dir={run_dir}", "+overwrite=true"], CONF)  # asked: allowed
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"")
    check_overrides([f"hydra.run.dir={run_dir}", "mode=full", f"ckpt_path={ckpt}"], CONF)  # resumed inside it
    for stopped in (
        "INTERRUPTED",
        "RANK_LOST",
        "RANK_STALLED",
    ):  # a requeued or restarted job, in its own dir
        write_verdict(run_dir, stopped)
        check_overrides([f"hydra.run.dir={run_dir}", "mode=full"], CONF)


def test_a_sweep_dir_holding_verdicts_is_refused(capsys, tmp_path):
    write_verdict(tmp_path / "sweep" / "0", "PASS")
    message = refused(capsys, "-m", "n=1,2", f"hydra.sweep.dir={tmp_path}/sweep")
    assert message.startswith(f"error: hydra.sweep.dir={tmp_path}/sweep: already holds a sweep"), message


def test_a_job_refuses_an_earlier_runs_dir_and_keeps_its_verdict(make_config, tmp_path, capsys):
    """The Hydra job itself (harness.tasks.job, what every launcher calls) refuses too, and writes nothing there."""
    from harness.tasks.job import job

    write_verdict(tmp_path / "run", "PASS")
    with pytest.raises(SystemExit) as stop:
        job(make_config("preflight=false", *PROBES_OFF))
    assert stop.value.code == 2 and "already holds a run (verdict PASS)" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["status"] == "PASS"
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_interrupted_run_dir_is_the_same_run_started_again(make_config, tmp_path, one_thread):
    """A requeued job reruns in the dir whose verdict says INTERRUPTED: not refused, it runs to its verdict."""
    from harness.tasks.job import job

    write_verdict(tmp_path / "run", "INTERRUPTED")
    with pytest.raises(SystemExit) as stop:  # a single run exits with its verdict's code
        job(make_config("preflight=false", "mode.max_steps=2", *PROBES_OFF))
    assert stop.value.code == 1 and json.loads((tmp_path / "run" / "verdict.json").read_text())["steps"] == 2


def test_a_config_mistake_in_a_stopped_runs_dir_leaves_its_verdict_to_resume_from(
    make_config, tmp_path, capsys
):
    """A requeued run that meets a config mistake (here: more examples than its data holds) exits 2 and keeps the
    INTERRUPTED verdict the run resumes from once the mistake is fixed; in a dir of its own it is CONFIG_ERROR."""
    from harness.tasks.job import job

    write_verdict(tmp_path / "run", "INTERRUPTED")
    with pytest.raises(SystemExit) as stop:
        job(make_config("preflight=false", "n=5000", *PROBES_OFF))
    assert stop.value.code == 2 and "error: n=5000" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["status"] == "INTERRUPTED"
    with pytest.raises(SystemExit) as stop:
        job(make_config("preflight=false", "n=5000", *PROBES_OFF, run_dir=tmp_path / "own"))
    assert stop.value.code == 2 and json.loads((tmp_path / "own" / "verdict.json").read_text())["status"] == (
        "CONFIG_ERROR"
    )


# -- checkpoints of another mode ---------------------------------------------------------------------------------


@pytest.fixture
def overfit_then_full(tmp_path, make_config, one_thread):
    """An overfit run under outputs/runs/, then the config of a full run beside it with ckpt_path=last."""
    from harness.tasks.training import run

    runs = tmp_path / "outputs" / "runs" / "day"
    run(make_config("preflight=false", "mode.max_steps=2", *PROBES_OFF, run_dir=runs / "overfit"))
    assert (runs / "overfit" / "checkpoints" / "last.ckpt").is_file()

    def full(*extra: str):
        args = ("mode=full", "mode.max_steps=3", "preflight=false", "ckpt_path=last", *PROBES_OFF, *extra)
        args = (*args, f"paths.log_dir={tmp_path / 'outputs'}")  # where ckpt_path=last looks: its runs/
        return make_config(*args, run_dir=runs / "full")

    return runs, full


def test_a_checkpoint_of_another_mode_is_refused(overfit_then_full):
    from harness.tasks.training import run

    runs, full = overfit_then_full
    with pytest.raises(ConfigError) as err:
        run(full())
    message = str(err.value)
    assert message.startswith("ckpt_path=last: ") and "mode=overfit run" in message, message
    assert str(runs / "overfit") in message and "+resume_any_mode=true" in message
    assert not (runs / "full" / "metrics.csv").exists()  # refused before any work


def test_resume_names_the_run_and_mode_it_resumes_from(overfit_then_full, caplog):
    from harness.tasks.training import run

    runs, full = overfit_then_full
    with caplog.at_level("INFO", logger="harness.train.checkpoints"):
        verdict = run(full("+resume_any_mode=true"))
    assert verdict["status"] == "DONE" and verdict["steps"] == 3
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resuming from")]
    assert said == [
        f"resuming from {runs / 'overfit' / 'checkpoints' / 'last.ckpt'}: the mode=overfit run in "
        f"{runs / 'overfit'}"
    ], said


# -- +overwrite=true ------------------------------------------------------------------------------------------------


def earlier_run(run_dir: Path) -> None:
    """What an earlier full run leaves in its dir: a verdict, its checkpoints, its log, a tracker's files."""
    write_verdict(run_dir, "DONE")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "best.ckpt").write_bytes(b"earlier")
    (run_dir / "train.log").write_text("a line of the earlier run\n")
    (run_dir / ".hydra").mkdir()
    (run_dir / "tensorboard").mkdir()
    (run_dir / "tensorboard" / "events").write_text("earlier")


def test_overwrite_leaves_nothing_of_the_run_it_replaces(tmp_path):
    run_dir = tmp_path / "earlier"
    earlier_run(run_dir)
    check_overrides([f"hydra.run.dir={run_dir}", "+overwrite=true"], CONF)
    assert run_dir.is_dir() and list(run_dir.iterdir()) == [], list(run_dir.iterdir())
    # a sweep dir: every earlier job and the summary go
    sweep = tmp_path / "sweep"
    for job in ("0", "1", "2"):
        earlier_run(sweep / job)
    (sweep / "summary.md").write_text("earlier")
    check_overrides(["-m", f"hydra.sweep.dir={sweep}", "n=1,2", "+overwrite=true"], CONF)
    assert list(sweep.iterdir()) == []
    # a run that continues inside its own dir keeps it: its checkpoint is what it resumes from
    earlier_run(run_dir)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"resumed from")
    ckpt = f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"
    check_overrides([f"hydra.run.dir={run_dir}", "+overwrite=true", "mode=full", ckpt], CONF)
    assert (run_dir / "checkpoints" / "best.ckpt").is_file() and (run_dir / "train.log").is_file()


def test_overwrite_is_rank_0s_alone_where_ranks_start_together(tmp_path, monkeypatch):
    """Under torchrun or SLURM every rank passes the door at once: rank 1 emptying the dir would delete what rank 0
    has begun to write there."""
    run_dir = tmp_path / "earlier"
    earlier_run(run_dir)
    monkeypatch.setenv("RANK", "1")
    check_overrides([f"hydra.run.dir={run_dir}", "+overwrite=true"], CONF)
    assert (run_dir / "verdict.json").is_file() and (run_dir / "train.log").is_file()
    monkeypatch.setenv("RANK", "0")
    check_overrides([f"hydra.run.dir={run_dir}", "+overwrite=true"], CONF)
    assert list(run_dir.iterdir()) == []


def test_only_rank_0_writes_hydras_own_files_where_ranks_start_together(tmp_path, monkeypatch):
    run_dir = [f"hydra.run.dir={tmp_path / 'run'}"]
    monkeypatch.setenv("RANK", "1")
    assert "hydra.output_subdir=null" in check_overrides(run_dir, CONF)
    monkeypatch.setenv("RANK", "0")
    assert "hydra.output_subdir=null" not in check_overrides(run_dir, CONF)


def test_overwrite_never_empties_a_folder_holding_the_working_directory(capsys, tmp_path, monkeypatch):
    earlier_run(tmp_path / "project")
    (tmp_path / "project" / "my_code.py").write_text("precious\n")
    monkeypatch.chdir(tmp_path / "project")
    message = refused(capsys, "hydra.run.dir=.", "+overwrite=true")
    assert "+overwrite=true empties the run dir it replaces" in message and "working directory" in message
    assert (tmp_path / "project" / "my_code.py").read_text() == "precious\n"


@pytest.mark.slow  # two train.py runs: ~20 s
def test_an_overwritten_run_dir_holds_only_the_new_run(run_train, tmp_path):
    first = run_train(
        "mode=full", "mode.max_steps=4", "mode.val_every=2", "mode.ckpt_every=2", "preflight=false"
    )
    assert first.returncode == 0 and (tmp_path / "run" / "checkpoints" / "best.ckpt").is_file(), first.stderr
    old_lines = (tmp_path / "run" / "train.log").read_text().splitlines()
    second = run_train("n=1", "mode.max_steps=2", "preflight=false", "+overwrite=true", *PROBES_OFF)
    assert second.returncode == 1, second.stderr[-2000:]  # 2 steps do not memorize: FAIL, judged
    run_dir = tmp_path / "run"
    assert not (run_dir / "checkpoints" / "best.ckpt").exists(), "the replaced run's best checkpoint is left"
    log = (run_dir / "train.log").read_text()
    assert old_lines[0] not in log and old_lines[-1] not in log, log[
        :2000
    ]  # both hold the time they were said
    assert sum("verdict" in line and "INFO" in line for line in log.splitlines()) == 1, log[-2000:]
    assert json.loads((run_dir / "verdict.json").read_text())["mode"] == "overfit"
