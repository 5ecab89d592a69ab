"""Every bad value is refused at the door: one line naming the key, exit 2, before any data or preflight work.
A run directory that holds an earlier run, and a checkpoint of another mode, are refused the same way."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from harness.cli.overrides import check_overrides
from harness.errors import ConfigError
from tests.conftest import CONF, PROBES_OFF, run_command, sampled


def refused(capsys, *overrides: str) -> str:
    """The one line check_overrides prints for `overrides` as it exits 2."""
    with pytest.raises(SystemExit) as stop:
        check_overrides(list(overrides), CONF)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.fixture
def no_wandb_key(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


BAD_VALUES = [
    ("optim.lr=abc", "optim.lr=abc: optim.lr must be a number"),
    ("optim.lr=-1", "optim.lr=-1: must be >= 0"),
    ("trainer.devices=0", "trainer.devices=0:"),
    ("trainer.devices=-2", "trainer.devices=-2:"),
    (
        "trainer.gradient_clip_val=abc",
        "trainer.gradient_clip_val=abc: trainer.gradient_clip_val must be a number",
    ),
    ("logger.mode=bogus", "logger.mode=bogus: no such key"),
    ("logger=wandb logger.wandb.mode=bogus", "logger.wandb.mode=bogus: choose one of offline, online"),
    ("logger=wandb logger.wandb.mode=online", "logger.wandb.mode=online: no wandb API key"),
    ("mode=full data.batch_size=-1", "data.batch_size=-1: must be >= 1"),
    ("model.d_model=0", "model.d_model=0: must be >= 1"),
    ("model=rnn model.layers=1.5", "model.layers=1.5: must be a whole number"),
    ("probes=off +overwrite=yes", "overwrite=yes: must be true or false"),
]


@pytest.mark.parametrize(("overrides", "line"), sampled(BAD_VALUES, every=2), ids=[o for o, _ in BAD_VALUES])
def test_bad_value_is_one_line_naming_the_key_before_any_work(
    overrides, line, capsys, tmp_path, no_wandb_key
):
    run_dir, data_root = tmp_path / "run", tmp_path / "data"
    message = refused(capsys, *overrides.split(), f"hydra.run.dir={run_dir}", f"data.root={data_root}")
    assert message.startswith(f"error: {line}"), message
    assert not run_dir.exists() and not data_root.exists()  # no data made, no preflight run


def test_a_wandb_server_out_of_reach_is_refused_at_once(capsys, monkeypatch, tmp_path):
    """With a key but no network wandb waits 90 s and then raises; the door tries the server for a few seconds."""
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    started = time.perf_counter()
    message = refused(capsys, "logger=wandb", "logger.wandb.mode=online", f"hydra.run.dir={tmp_path}/run")
    assert "logger.wandb.mode=online: cannot reach 127.0.0.1:9" in message and "mode=offline" in message
    assert time.perf_counter() - started < 60  # wandb's own wait is 90 s


def test_a_wandb_key_in_netrc_counts(capsys, monkeypatch, tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1\n  login user\n  password " + "0" * 40 + "\n")
    netrc.chmod(0o600)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    message = refused(capsys, "logger=wandb", "logger.wandb.mode=online", f"hydra.run.dir={tmp_path}/run")
    assert "cannot reach" in message  # past the key: the netrc entry was found


def test_good_values_of_other_kinds_pass(tmp_path):
    for overrides in (
        ["trainer.devices='1'"],  # a list of ids ([0]) is a GPU's: Lightning refuses it on the CPU
        ["trainer.devices=auto"],
        ["optim.lr=1"],
        ["trainer.gradient_clip_val=null"],
    ):
        check_overrides([*overrides, f"hydra.run.dir={tmp_path}/run"], CONF)


def test_an_unquoted_non_ascii_value_is_told_how_to_quote(capsys):
    message = refused(capsys, "data.alphabet=αβγ")
    assert "data.alphabet=αβγ" in message and "\"data.alphabet='αβγ'\"" in message


def test_devices_read_as_lightning_reads_them(make_config):
    from harness.train.distributed.devices import processes

    assert processes(make_config("trainer.devices=3").trainer) == 3  # strategy auto: Lightning picks DDP
    assert processes(make_config("trainer.devices=[0,1]").trainer) == 2
    assert processes(make_config("trainer.devices=auto").trainer) == 1
    assert processes(make_config("trainer=ddp").trainer) == 2
    assert processes(make_config("trainer.devices=4", "+trainer.strategy=single_device").trainer) == 1


def test_several_devices_under_strategy_auto_are_held_against_the_cores(capsys, monkeypatch):
    """trainer.devices=8 with strategy auto started 8 DDP processes on a 2-core machine."""
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # the machine's size, not a part under test
    message = refused(capsys, "trainer.devices=8")
    assert message.startswith("error: trainer.devices=8: this machine has 2 CPU cores"), message
    message = refused(capsys, "-m", "trainer.devices=2", "n=1,2")
    assert "in a local sweep" in message  # a local sweep with DDP is refused, chosen by auto or not


def test_a_read_only_data_root_is_refused_naming_it(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    message = refused(capsys, f"data.root={tmp_path}/file/data", f"hydra.run.dir={tmp_path}/run")
    assert message.startswith(f"error: data.root={tmp_path}/file/data: cannot write there"), message


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs /sys, which no one may write")
def test_an_existing_read_only_data_root_is_refused_when_the_dataset_must_be_made(make_config):
    from harness.tasks.training import run

    with pytest.raises(ConfigError, match=r"^data.root=/sys: cannot write the dataset there"):
        run(make_config("data.root=/sys", "preflight=false", *PROBES_OFF))


def test_bad_values_through_train_py_exit_2_in_one_line(run_train, tmp_path):
    """The real command line: one line on stderr, exit 2, and Hydra never started (no run dir)."""
    for override in ("optim.lr=abc", "trainer.devices=0", "model.d_model=0"):
        result = run_train(override)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 and override in lines[0], result.stderr[-2000:]
        assert not (tmp_path / "run").exists()


def test_the_trainer_argument_lightning_refuses_is_named(make_config):
    """Past the door (a value only Lightning checks): the key is named, not `trainer.?`."""
    from harness.tasks.training import build_trainer

    cfg = make_config("trainer.gradient_clip_val=abc")
    with pytest.raises(ConfigError, match=r"^trainer.gradient_clip_val=abc: Lightning refuses it"):
        build_trainer(cfg, Path(cfg.hydra.runtime.output_dir), [], [])


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


# -- what the config builds, built at the door --------------------------------------------------------------------

LIBRARY_REFUSALS = [
    # (overrides, the start of the line: the key at fault and its value, named from the library's refusal)
    (
        "optim=sgd optim.nesterov=true optim.momentum=0",
        "optim.nesterov=true: torch.optim.SGD refuses it (Nesterov",
    ),
    ("optim.lr=nan", "optim.lr=nan: torch.optim.AdamW refuses it (Invalid learning rate"),
    ("optim.lr=0.01 optim.betas=[2,0.9]", "optim.betas=[2, 0.9]: torch.optim.AdamW refuses it"),  # lr is fine
    ("trainer.precision=13", "trainer.precision=13: Lightning refuses it (Precision 13 is invalid"),
    ("trainer.accelerator=tpu", "trainer.accelerator=tpu: Lightning refuses it (Requirement 'torch_xla"),
    ("+trainer.limit_val_batches=-1", "trainer.limit_val_batches=-1: Lightning refuses it"),
    ("+trainer.profiler=bogus", "trainer.profiler=bogus: Lightning refuses it"),
    (
        "+trainer.accumulate_grad_batches=0",
        "trainer.accumulate_grad_batches=0: Lightning refuses it",
    ),  # at fit
    ("+trainer.detect_anomaly=x", "trainer.detect_anomaly=x: Lightning refuses it"),  # only when it fits
    ("model.dropout=2", "model.dropout=2: harness.models.Transformer refuses it (dropout probability"),
    ("model=gpt model.heads=3", "model.heads=3: must divide model.d_model=128"),
    ("loss=label_smoothing loss.smoothing=2", "loss.smoothing=2: "),
    ("probes.grad_by_position.examples=0", "probes.grad_by_position.examples=0: must be a whole number >= 1"),
    ("data.alphabet=''", "data.alphabet='': must be a non-empty string"),
    ("data.labels=''", "data.labels='': must be a non-empty string"),
    ("data=text data.alphabet=ab", "data.alphabet='ab': the corpus (the built-in one) holds"),
    (
        "-m n=1,2 trainer.precision=32-true,13",
        "trainer.precision=13: Lightning refuses it",
    ),  # one job's value
    ("-m hydra/launcher=parallel hydra.launcher.n_jobs=0 n=1,2", "hydra.launcher.n_jobs=0: "),
    ("-m hydra/launcher=parallel hydra.launcher.batch_size=0 n=1,2", "hydra.launcher.batch_size=0: "),
]


@pytest.mark.parametrize(
    ("overrides", "line"), sampled(LIBRARY_REFUSALS), ids=[o for o, _ in LIBRARY_REFUSALS]
)
def test_a_value_a_library_refuses_when_it_builds_is_one_line_naming_the_key(
    overrides, line, capsys, tmp_path
):
    """The optimizer, schedule, Trainer, launcher and data source are built at the door: a value their library
    refuses only when it builds them is named (the key whose own value, set back, builds), before any work."""
    if "torch_xla" in line and importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed here: a TPU accelerator is not refused for its package")
    run_dir, data_root = tmp_path / "run", tmp_path / "data"
    message = refused(
        capsys,
        *overrides.split(),
        f"hydra.run.dir={run_dir}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"data.root={data_root}",
    )
    assert message.startswith(f"error: {line}"), message
    assert not run_dir.exists() and not data_root.exists() and not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_the_config_files_values_all_build():
    """The other side of the refusals above: every config file's own values build at the door (no refusal
    without a value given), whichever option of each group."""
    for overrides in (
        [],
        ["optim=sgd"],
        ["schedule=cosine"],
        ["schedule=linear", "mode=full"],
        ["data=text"],
        ["callbacks=rich"],
        ["-m", "hydra/launcher=parallel", "n=1,2"],
        ["-m", "hydra/launcher=local", "n=1,2"],
        ["debug=profiler"],  # a value that reads the job's own dir (${hydra:runtime.output_dir})
        ["debug=fdr"],
        ["model=gpt", "model.size=gpt2"],  # built on the meta device: no memory, no time
        ["model=lstm", "loss=z_loss"],
        ["experiment=lm"],
        ["trainer=ddp"],  # several processes: built, not fitted at the door
        ["trainer=fsdp"],  # sharded: the strategy built from its _target_, not fitted
    ):
        assert check_overrides([*overrides, "hydra.run.dir=unused", "hydra.sweep.dir=unused"], CONF) == []


def test_a_typo_is_refused_before_torch_is_imported(tmp_path):
    """The builds need torch and Lightning; a mistake the cheap checks see costs none of that import time."""
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('heavy:', [m for m in ('torch', 'pytorch_lightning') if m in sys.modules]))\n"
        f"sys.argv = ['train.py', 'optim.lr=-1', 'hydra.run.dir={tmp_path}/run']\n"
        "from harness.cli import main\n"
        f"main({str(CONF)!r})\n"
    )
    started = time.perf_counter()
    result = run_command(sys.executable, "-c", probe, cwd=tmp_path)
    assert result.returncode == 2 and "heavy: []" in result.stdout, result.stdout + result.stderr[-2000:]
    assert result.stderr.strip().startswith("error: optim.lr=-1: must be >= 0"), result.stderr
    assert time.perf_counter() - started < 10  # well under the ~5 s torch and Lightning take on their own


@pytest.mark.slow  # two train.py runs that import torch and Lightning at the door: ~15 s
def test_a_library_refusal_through_train_py_is_one_line_and_exit_2(run_train, tmp_path):
    for override in ("optim.lr=nan", "trainer.precision=13"):
        result = run_train(override)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
        assert (
            lines[0].startswith(f"error: {override}: ") and "Traceback" not in result.stdout + result.stderr
        )
        assert not (tmp_path / "run").exists()


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
