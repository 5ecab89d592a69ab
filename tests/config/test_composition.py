"""The Lightning + Hydra composition users bring from lightning-hydra-template and Lightning: trainer keys, Lightning's
own log lines, the callbacks, debug and paths groups, and the config tree."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.errors import ConfigError
from harness.tasks.validate import validate
from harness.train.trainer_args import TRAINER_KEYS
from tests.conftest import CONF, PROBES_OFF, train

QUICK = ("preflight=false", *PROBES_OFF)


def trainer_for(cfg, tmp_path):
    """The Trainer harness.tasks.training builds for `cfg`, with the callbacks group's callbacks (no fit)."""
    from harness.train.trainer import build_callbacks, build_trainer

    return build_trainer(cfg, tmp_path, build_callbacks(cfg), [])


# 1. trainer keys


@pytest.mark.parametrize("key", sorted(TRAINER_KEYS))
def test_a_trainer_key_harness_sets_is_refused_naming_the_key_to_use(key, make_config):
    with pytest.raises(ConfigError) as err:
        validate(make_config(f"+trainer.{key}=1"))
    assert str(err.value) == f"trainer.{key}=1: harness sets it; {TRAINER_KEYS[key]}", err.value


def test_the_command_line_refuses_trainer_max_epochs_in_one_line(capsys, tmp_path, monkeypatch):
    """At the door, before Lightning is imported: exit 2 and one line, not a TypeError from Trainer()."""
    from harness.cli.overrides import check_overrides

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        check_overrides(["+trainer.max_epochs=1"], CONF)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert (
        err
        == "error: trainer.max_epochs=1: harness sets it; the harness counts steps, not epochs; use mode.max_steps\n"
    )


def test_build_trainer_sets_no_trainer_key_that_is_not_refused(make_config, tmp_path, monkeypatch):
    """Every argument harness passes itself is either refused under trainer. (TRAINER_KEYS) or a default a trainer
    key replaces: a new one added to build_trainer without either would crash as `multiple values` again."""
    import harness.tasks.training

    seen = {}
    monkeypatch.setattr(harness.tasks.training.pl, "Trainer", lambda **kwargs: seen.update(kwargs))
    cfg = make_config("+trainer.num_sanity_val_steps=2")
    harness.tasks.training.build_trainer(cfg, tmp_path, [], [])
    assert seen["num_sanity_val_steps"] == 2  # a harness default the trainer key replaced
    # the defaults a trainer key replaces (enable_model_summary: test_enable_model_summary_works_both_ways)
    defaults = {"num_sanity_val_steps", "enable_model_summary"}
    unrefused = set(seen) - set(TRAINER_KEYS) - set(cfg.trainer) - defaults
    assert not unrefused, f"build_trainer sets {unrefused}: add them to harness.train.trainer_args.OWNED"


def test_enable_model_summary_works_both_ways(make_config, tmp_path):
    from pytorch_lightning.callbacks import ModelSummary

    def summaries(*overrides):
        trainer = trainer_for(make_config(*overrides), tmp_path)
        return [type(c).__name__ for c in trainer.callbacks if isinstance(c, ModelSummary)]

    assert summaries("+trainer.enable_model_summary=true") == ["ModelSummary"]
    assert summaries("+trainer.enable_model_summary=false") == []


def test_a_trainer_value_with_a_target_is_built(make_config, tmp_path):
    from pytorch_lightning.profilers import AdvancedProfiler

    cfg = make_config("+trainer.profiler._target_=pytorch_lightning.profilers.AdvancedProfiler")
    assert isinstance(trainer_for(cfg, tmp_path).profiler, AdvancedProfiler)


def test_a_callback_lightning_refuses_with_the_mode_is_one_line(make_config, tmp_path):
    """A ModelCheckpoint added in overfit mode (no checkpointing there): Lightning's refusal, as a ConfigError."""
    cfg = make_config(
        "+callbacks.ckpt._target_=pytorch_lightning.callbacks.ModelCheckpoint",
        f"+callbacks.ckpt.dirpath={tmp_path}",
    )
    with pytest.raises(
        ConfigError, match=r"^callbacks=ModelCheckpoint: Lightning refuses it: .*enable_checkpointing=False"
    ):
        trainer_for(cfg, tmp_path)


# 3. callbacks


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (("mode=overfit",), ["ModelSummary"]),  # no bar: mode.progress_bar is false
        (("mode=full",), ["ModelSummary", "TQDMProgressBar"]),
        (("mode=full", "callbacks=early_stopping"), ["ModelSummary", "TQDMProgressBar", "EarlyStopping"]),
        (("mode=full", "callbacks=rich"), ["RichModelSummary", "RichProgressBar"]),
        (("mode=full", "callbacks.model_summary=null"), ["TQDMProgressBar"]),
    ],
    ids=["overfit", "full", "early_stopping", "rich", "one_off"],
)
def test_callbacks_group_builds_its_entries_and_respects_the_progress_bar(overrides, expected, make_config):
    from harness.train.trainer import build_callbacks

    assert [type(c).__name__ for c in build_callbacks(make_config(*overrides))] == expected


def test_a_callback_argument_it_does_not_take_is_one_line(make_config):
    from harness.train.trainer import build_callbacks

    with pytest.raises(ConfigError) as err:
        build_callbacks(make_config("mode=full", "+callbacks.progress_bar.every=3"))
    assert str(err.value).startswith("callbacks.progress_bar.every=3:") and "takes no argument" in str(
        err.value
    )


def test_callbacks_rich_trains_with_rich_s_bar(make_config, tmp_path, one_thread):
    """Rich's progress bar and summary through a real (two-step) full run: they must not break the fit."""
    from harness.tasks.training import run

    verdict = run(make_config("mode=full", "callbacks=rich", "mode.max_steps=2", "mode.val_every=2", *QUICK))
    assert verdict["status"] == "DONE" and verdict["steps"] == 2, verdict


def test_callbacks_early_stopping_stops_a_full_run(make_config, one_thread):
    """No improvement can count (min_delta 100): the second validation stops the run, long before max_steps."""
    from harness.tasks.training import run

    cfg = make_config(
        "mode=full",
        "callbacks=early_stopping",
        "callbacks.early_stopping.patience=1",
        "callbacks.early_stopping.min_delta=100",
        "mode.val_every=2",
        "mode.max_steps=40",
        "+trainer.limit_val_batches=1",
        *QUICK,
    )
    verdict = run(cfg)
    assert verdict["status"] == "DONE" and verdict["steps"] == 4, verdict


def test_overfit_still_passes_with_the_default_callbacks(make_config, one_thread):
    from harness.report.verdict import exit_code
    from harness.tasks.training import run

    cfg = make_config("n=1", *QUICK)
    assert [c for c in cfg.callbacks] == ["model_summary", "progress_bar"]
    verdict = run(cfg)
    assert verdict["status"] == "PASS" and exit_code(verdict) == 0, verdict
    assert "debug" not in verdict


# 4. debug


@pytest.mark.parametrize("mode", ["overfit", "full"])
def test_debug_fdr_is_reported_as_debug_not_fail(mode, make_config, tmp_path, one_thread):
    """One batch, status DEBUG (exit 0) whatever the mode, and no checkpoint (the mode's own included)."""
    from harness.report.verdict import exit_code
    from harness.tasks.training import run

    verdict = run(make_config("debug=fdr", f"mode={mode}", "preflight=false", run_dir=tmp_path / "fdr"))
    assert (verdict["status"], verdict["debug"], verdict["steps"]) == ("DEBUG", "fdr", 1), verdict
    assert exit_code(verdict) == 0
    assert not list(tmp_path.glob("fdr/checkpoints/*")), "a fast dev run saves no checkpoint"
    assert json.loads((tmp_path / "fdr" / "verdict.json").read_text())["status"] == "DEBUG"


def test_debug_limit_runs_a_few_steps_and_is_not_judged(make_config, one_thread):
    from harness.tasks.training import run

    verdict = run(make_config("debug=limit", "mode=full", *QUICK))
    assert (verdict["status"], verdict["debug"], verdict["steps"]) == ("DEBUG", "limit", 10), verdict


def test_debug_anomaly_turns_on_torch_anomaly_detection(make_config, tmp_path):
    cfg = make_config("debug=anomaly")
    assert trainer_for(cfg, tmp_path)._detect_anomaly is True
    assert trainer_for(make_config(), tmp_path)._detect_anomaly is False


def test_a_fast_dev_run_outside_debug_fdr_is_refused(make_config):
    """It would be judged on one batch: an overfit FAIL that says nothing."""
    with pytest.raises(ConfigError, match=r"^trainer.fast_dev_run=True: use debug=fdr"):
        validate(make_config("+trainer.fast_dev_run=true"))


# 5. paths


def compose_plain(*overrides: str):
    """The config train.py composes, Hydra's node included, without the test fixtures' data.root."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


def test_paths_follow_their_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_DATA_DIR", str(tmp_path / "scratch-data"))
    monkeypatch.setenv("HARNESS_LOG_DIR", str(tmp_path / "scratch-out"))
    for data in ("synthetic", "text", "corpus"):
        assert compose_plain(f"data={data}").data.root == str(tmp_path / "scratch-data"), data
    cfg = compose_plain()
    assert cfg.hydra.run.dir.startswith(f"{tmp_path}/scratch-out/runs/"), cfg.hydra.run.dir
    assert cfg.hydra.sweep.dir.startswith(f"{tmp_path}/scratch-out/multirun/"), cfg.hydra.sweep.dir


def test_paths_default_to_data_and_outputs(monkeypatch):
    for name in ("HARNESS_DATA_DIR", "HARNESS_LOG_DIR"):
        monkeypatch.delenv(name, raising=False)
    cfg = compose_plain()
    assert cfg.data.root == "data" and cfg.hydra.run.dir.startswith("outputs/runs/"), cfg.hydra.run.dir


def test_ckpt_path_last_searches_the_log_dir(tmp_path, monkeypatch):
    """find_checkpoint looks in one place: paths.log_dir/runs, wherever that was moved."""
    from harness.train.checkpoints import find_checkpoint

    monkeypatch.setenv("HARNESS_LOG_DIR", str(tmp_path / "scratch-out"))
    cfg = compose_plain()
    run_dir = Path(cfg.hydra.run.dir)
    earlier = tmp_path / "scratch-out" / "runs" / "2026-01-01" / "00-00-00" / "checkpoints" / "last.ckpt"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"")
    assert find_checkpoint("last", run_dir, cfg.paths.log_dir) == str(earlier)


def test_no_config_hard_codes_the_data_or_outputs_folder():
    """Every data root and output dir reads paths.*: a cluster user moves them all with one variable."""
    for path in sorted(CONF.rglob("*.yaml")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            value = line.split("#")[0].partition(":")[2].strip()
            assert not (value == "data" or value.startswith(("data/", "outputs"))), (
                f"{path}:{i}: {line.strip()}"
            )


# 6. config tree


def test_config_tree_is_saved_whole_and_printed_short(make_config, tmp_path, caplog):
    from harness.config.show import show_config

    cfg = make_config("model=rnn")
    with caplog.at_level(logging.INFO, logger="harness.config.show"):
        path = show_config(cfg, tmp_path)
    whole = path.read_text()
    assert path.name == "config_tree.log"
    assert "model: rnn" in whole and "histograms" in whole and f"root: {cfg.data.root}" in whole, whole
    printed = caplog.records[0].getMessage()
    assert "model: rnn" in printed and len(printed.splitlines()) < 25, printed
    caplog.clear()
    show_config(cfg, tmp_path, console=False)  # a sweep job: the file only
    assert not caplog.records


# 2, 3, 4, 6 through the real command line: one run with Lightning's INFO lines on, one with the defaults


@pytest.fixture(scope="module")
def info_run(tmp_path_factory, data_root):
    cwd = tmp_path_factory.mktemp("info")
    done = train(
        "hydra.job_logging.loggers.pytorch_lightning.level=INFO",
        "debug=profiler",
        "mode.max_steps=3",
        *QUICK,
        cwd=cwd,
        data_root=data_root,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done, cwd / "run"


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, data_root):
    cwd = tmp_path_factory.mktemp("default")
    done = train("debug=fdr", *QUICK, cwd=cwd, data_root=data_root)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, cwd / "run"


@pytest.mark.slow
def test_lightning_info_lines_reach_train_log_when_asked(info_run, default_run):
    _, run_dir = info_run
    assert "GPU available:" in (run_dir / "train.log").read_text()
    _, quiet = default_run  # Lightning's loggers at WARNING, as conf/train.yaml has them
    assert "GPU available:" not in (quiet / "train.log").read_text()


@pytest.mark.slow
def test_debug_profiler_saves_and_prints_its_report(info_run):
    done, run_dir = info_run
    report = (run_dir / "fit-profiler.txt").read_text()
    assert "FIT Profiler Report" in report and "run_training_epoch" in report, report[:2000]
    assert "FIT Profiler Report" in (run_dir / "train.log").read_text()
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["debug"] == "profiler" and verdict["status"] in ("PASS", "FAIL"), (
        verdict
    )  # judged as usual


@pytest.mark.slow
def test_model_summary_is_printed_at_the_start_by_default(default_run):
    done, run_dir = default_run
    assert "Trainable params" in (run_dir / "train.log").read_text()


@pytest.mark.slow
def test_a_run_prints_the_short_tree_and_saves_the_whole(default_run):
    done, run_dir = default_run
    assert "config (every key:" in done.stdout + done.stderr
    assert "model: transformer" in (run_dir / "config_tree.log").read_text()


@pytest.mark.slow
def test_debug_fdr_on_the_command_line_exits_0_with_status_debug(default_run):
    done, run_dir = default_run
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert (done.returncode, verdict["status"], verdict["debug"]) == (0, "DEBUG", "fdr"), verdict


def test_the_schema_declares_the_new_groups(make_config):
    """callbacks, debug and paths are declared in the schema (harness/config/schema.py): a group file merges into them."""
    cfg = make_config("debug=fdr")
    assert OmegaConf.select(cfg, "debug.name") == "fdr" and cfg.paths.data_dir and cfg.callbacks.model_summary


def test_no_model_summary_callback_means_no_summary(make_config, tmp_path):
    """callbacks.model_summary=null: Lightning would add its own ModelSummary unless told there is none."""
    from pytorch_lightning.callbacks import ModelSummary

    from harness.train.trainer import build_trainer

    cfg = make_config("callbacks.model_summary=null")
    without = build_trainer(cfg, tmp_path, callbacks=[], loggers=[])
    assert not [c for c in without.callbacks if isinstance(c, ModelSummary)]
    with_one = build_trainer(cfg, tmp_path, callbacks=[ModelSummary()], loggers=[])
    assert len([c for c in with_one.callbacks if isinstance(c, ModelSummary)]) == 1


def test_the_config_composes_wherever_hydra_starts_without_importing_the_harness_first(tmp_path):
    """The schema the defaults start from is registered by Hydra's own plugin scan (hydra_plugins.harness_schema):
    a notebook or a benchmark that composes conf/ needs no import of the harness, and gets none of its heavy parts."""
    from tests.conftest import run_command

    probe = (
        "import sys\nfrom hydra import compose, initialize_config_dir\n"
        f"with initialize_config_dir(config_dir={str(CONF)!r}, version_base='1.3'):\n"
        "    cfg = compose(config_name='train', overrides=['mode=full'])\n"
        "print(cfg.mode.name, cfg.mode.val_every, sorted(m for m in ('torch', 'harness.tasks') if m in sys.modules))"
    )
    result = run_command(sys.executable, "-c", probe, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    name, _, heavy = result.stdout.strip().partition(" ")
    assert name == "full" and heavy.endswith("[]"), result.stdout
