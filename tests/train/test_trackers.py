"""Experiment trackers: several at once (logger=[...]), MLflow's local store, the composed config and the tags
in every tracker (read back with each tracker's own reader), and a requeued SLURM job continuing its run."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.report.verdict import read_verdict
from harness.tasks.training import run
from harness.train.interrupt import StopOnSignal
from tests.conftest import CONF, PROBES_OFF, start_command

TINY = ["n=1", "mode.max_steps=3", "preflight=false", "data.length=8", *PROBES_OFF]


def compose_logger(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        return compose(config_name="train", overrides=list(overrides))


def train_steps(path: Path) -> list[int]:
    with open(path, newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")]


# --- composition -------------------------------------------------------------------------------------------------


def test_several_trackers_compose_side_by_side():
    """Each logger option is a key of its own under logger, so a list of options keeps all of them."""
    assert OmegaConf.to_container(compose_logger().logger) == {"csv": {}}
    cfg = compose_logger("logger=[csv,tensorboard,wandb,mlflow]", "logger.wandb.mode=disabled")
    assert list(cfg.logger) == ["csv", "tensorboard", "wandb", "mlflow"]
    assert cfg.logger.wandb.mode == "disabled" and cfg.logger.wandb.project == "harness"
    assert cfg.logger.tensorboard.name == "tensorboard" and cfg.logger.mlflow.experiment == "harness"
    assert list(compose_logger("logger=wandb").logger) == ["wandb"], "one option still means that one alone"


def test_a_key_of_the_old_flat_layout_names_where_it_went(capsys, tmp_path, monkeypatch):
    """logger.mode=online was the wandb option's key before trackers could be combined: refused in one line
    that lists the keys under logger (wandb), where it lives now."""
    from harness.cli.overrides import check_overrides

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        check_overrides(["logger=wandb", "logger.mode=online"], CONF)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1, err
    assert (
        err[0].startswith("error: logger.mode=online: no such key") and "keys under logger: wandb" in err[0]
    )


# --- every tracker, read back with its own reader -----------------------------------------------------------------


def wandb_records(run_dir: Path) -> list:
    """The records of the offline wandb run in `run_dir`, decoded with wandb's own protobuf messages. wandb 0.31
    writes an offline run's config only into its transaction log (`run-<id>.wandb`, which `wandb sync` uploads),
    and ships no Python reader of it: the log is LevelDB's format, 32 KiB blocks of records each behind a
    7-byte header (crc32, length, type: 1 whole, 2 first, 3 middle, 4 last part), after a 7-byte file header."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data, block, position, pending, records = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B", data[:8]
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_run_ids(run_dir: Path) -> list[str]:
    """The run id of each offline wandb run in `run_dir`, from its log's name (run-<id>.wandb): the folder's
    name gets a suffix when two runs start in the same second."""
    return sorted(path.stem.removeprefix("run-") for path in run_dir.glob("wandb/offline-run-*/run-*.wandb"))


def tensorboard_hparams(log_dir: Path) -> tuple[dict, list[str]]:
    """The hyperparameters and the metric names of TensorBoard's HPARAMS tab, read from the event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(log_dir))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
    params = {
        key: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
        for key, value in start.session_start_info.hparams.items()
    }
    metrics = [info.name.tag for info in experiment.experiment.metric_infos]
    return params, metrics


@pytest.mark.slow
def test_every_tracker_gets_metrics_config_and_tags(make_config, tmp_path, monkeypatch):
    """One run, logger=[tensorboard,wandb,mlflow] with tags: metrics.csv as always; each tracker holds the
    composed config flattened (model.d_model, optim.lr) and the tags; no socket leaves the machine."""
    attempts = []
    connect = socket.socket.connect

    def guarded(sock, address, *args):  # wandb's service is spoken to over a unix socket: allowed
        if sock.family != socket.AF_UNIX:
            attempts.append(address)
            raise OSError("network refused by the test")
        return connect(sock, address, *args)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    run_dir = tmp_path / "run"
    verdict = run(
        make_config(
            *TINY,
            "logger=[tensorboard,wandb,mlflow]",
            "tags=[baseline,smoke]",
            "model.d_model=48",
            run_dir=run_dir,
        )
    )
    assert verdict["status"] in ("PASS", "FAIL") and not attempts, attempts
    assert train_steps(run_dir / "metrics.csv") == [0, 1, 2], "metrics.csv is written whatever the trackers"

    # TensorBoard: the HPARAMS tab, beside the run's own loss curves
    params, metrics = tensorboard_hparams(run_dir / "tensorboard")
    assert params["model.d_model"] == 48 and params["optim.lr"] == pytest.approx(3e-3), params
    assert "baseline" in params["tags"] and "smoke" in params["tags"]
    assert metrics == ["train/loss", "val/loss"]

    # wandb: the records of the offline run (what `wandb sync` uploads): its config and its tags
    records = wandb_records(run_dir)
    (wandb_run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {
        item.key: json.loads(item.value_json)
        for r in records
        if r.WhichOneof("record_type") == "config"
        for item in r.config.update
    }
    assert config["model.d_model"] == 48 and config["optim.lr"] == pytest.approx(3e-3), config
    assert list(wandb_run.tags) == ["baseline", "smoke"], wandb_run.tags

    # MLflow: the SQLite store in the run dir, read with MLflow's own client
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}")
    run_id = (run_dir / "mlflow_run_id").read_text().strip()
    logged = client.get_run(run_id)
    assert logged.info.status == "FINISHED"
    assert logged.data.params["model.d_model"] == "48" and float(logged.data.params["optim.lr"]) == 3e-3
    assert logged.data.tags["baseline"] == logged.data.tags["smoke"] == "true"
    losses = client.get_metric_history(run_id, "train/loss")
    assert sorted(m.step for m in losses) == [0, 1, 2], losses
    assert client.get_experiment(logged.info.experiment_id).name == "harness"


def test_mlflow_holds_a_metric_whose_name_extends_another(tmp_path):
    """The probes log logit/p_correct and logit/p_correct/example_0: MLflow's file: store cannot hold both (a
    metric is a file there, its name a path); the run dir's SQLite store can."""
    from mlflow.tracking import MlflowClient

    from harness.train.loggers import mlflow_logger

    node = OmegaConf.create({"experiment": "harness", "run_name": None, "tracking_uri": None})
    logger = mlflow_logger(node, tmp_path, tags=[])
    logger.log_metrics({"logit/p_correct": 0.25, "logit/p_correct/example_0": 0.5}, step=0)
    logger.finalize("success")
    logged = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(logger.run_id).data.metrics
    assert logged == {"logit/p_correct": 0.25, "logit/p_correct/example_0": 0.5}, logged


def test_a_tracker_name_that_does_not_exist_is_one_line(make_config, tmp_path):
    from harness.errors import ConfigError
    from harness.train.loggers import build_loggers

    cfg = make_config(*TINY, "+logger.comet={project: x}")
    with pytest.raises(ConfigError, match=r"^logger.comet=.*no such tracker; choose among csv, tensorboard"):
        build_loggers(cfg, tmp_path)


# --- requeue: the same run dir, the same checkpoint, the same wandb run --------------------------------------------


class SignalAt(pl.Callback):
    """Sends this process `signum` at the end of step `step`: a SLURM time-limit warning, in-process."""

    def __init__(self, step: int, signum: int = signal.SIGUSR2):
        self.step, self.signum = step, signum

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="SIGUSR2 is POSIX")
@pytest.mark.slow
def test_interrupted_job_run_again_in_its_dir_resumes_last_ckpt_and_wandb_run(
    make_config, tmp_path, monkeypatch
):
    """What a requeued SLURM job does: stopped by SIGUSR2 (INTERRUPTED, last.ckpt), then the same job in the same
    run dir continues from that checkpoint (no step trained twice) and logs to the same wandb and MLflow runs."""
    from harness.train import full_run as modes

    callbacks = modes.Full.callbacks
    once = [SignalAt(step=4)]
    monkeypatch.setattr(modes.Full, "callbacks", lambda self, *a: [*callbacks(self, *a), *once])
    args = [
        "mode=full",
        "mode.max_steps=10",
        "mode.val_every=5",
        "mode.ckpt_every=100",
        "mode.log_every=1",
        "data.size=64",
        "data.batch_size=8",
        "preflight=false",
        "logger=[wandb,mlflow]",
        *PROBES_OFF,
    ]
    run_dir = tmp_path / "job"
    first = run(make_config(*args, run_dir=run_dir))
    assert first["status"] == "INTERRUPTED" and first["signal"] == signal.SIGUSR2 and first["steps"] == 5, (
        first
    )
    assert (run_dir / "checkpoints/last.ckpt").is_file()
    once.clear()
    second = run(make_config(*args, run_dir=run_dir))
    assert second["status"] == "DONE" and second["steps"] == 10, second
    # one metrics.csv across both: no step twice; step 4's row is lost (the signal stops the run after that
    # step's update, which the checkpoint holds, before Lightning logs it)
    assert train_steps(run_dir / "metrics.csv") == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    runs = wandb_run_ids(run_dir)
    assert len(runs) == 2 and runs[0] == runs[1] == (run_dir / "wandb/run_id").read_text().strip(), runs
    from mlflow.tracking import MlflowClient  # one MLflow run holds both parts of the curve

    client = MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}")
    (logged,) = client.search_runs([client.get_experiment_by_name("harness").experiment_id])
    losses = client.get_metric_history(logged.info.run_id, "train/loss")
    assert sorted(m.step for m in losses) == [0, 1, 2, 3, 5, 6, 7, 8, 9] and logged.info.status == "FINISHED"


@pytest.mark.parametrize(
    ("status", "resumes"),
    [
        ("INTERRUPTED", True),
        ("RANK_LOST", True),
        ("RANK_STALLED", True),
        ("DONE", False),
        ("NONFINITE", False),
        ("ERROR", False),
    ],
)
def test_only_an_interrupted_run_dir_is_continued(status, resumes, tmp_path):
    """A run dir whose verdict says it stopped part-way (a signal, a rank lost or stalled) and that holds
    checkpoints/last.ckpt is continued; a finished or failed run's dir, or one without the checkpoint, starts
    over."""
    from harness.report.verdict import write_verdict
    from harness.train.checkpoints import interrupted_here

    assert interrupted_here(tmp_path) is None
    write_verdict(tmp_path, {"status": status})
    assert interrupted_here(tmp_path) is None, "no checkpoint: nothing to continue from"
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints/last.ckpt").write_bytes(b"")
    assert interrupted_here(tmp_path) == (str(tmp_path / "checkpoints/last.ckpt") if resumes else None)


def test_the_signal_is_handed_on_to_the_launchers_handler(tmp_path):
    """After the checkpoint, SIGUSR2 goes to the handler that was there before harness's: submitit's on a SLURM
    job, which requeues it. Python's own Ctrl-C handler and the default action are not called."""
    calls = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    try:
        stop = StopOnSignal(tmp_path / "last.ckpt")
        stop.install()
        stop.deferring = True  # as during a training step: the step ends, then the checkpoint
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.01)
        assert stop.received == signal.SIGUSR2 and calls == [], "harness's handler first"
        stop.restore()
        stop.hand_on()
        assert calls == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, previous)
    stop = StopOnSignal(tmp_path / "last.ckpt")
    stop.received = signal.SIGINT  # the handler before is Python's default_int_handler: KeyboardInterrupt
    stop.hand_on()


def test_slurm_launcher_requeues_timed_out_jobs():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        launcher = compose(
            config_name="train",
            overrides=["hydra/launcher=slurm", "hydra.launcher.max_num_timeout=5"],
            return_hydra_config=True,
        ).hydra.launcher
        default = compose(config_name="train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert launcher._target_.endswith("SlurmLauncher") and launcher.max_num_timeout == 5
    assert default.hydra.launcher.max_num_timeout == 3 and default.hydra.launcher.signal_delay_s == 120


def task_pid(marker: str) -> int | None:
    """The pid of the submitit task process whose command line holds `marker` (its job folder)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "submitit.core._submit" in cmdline and marker in cmdline:
                return int(proc.name)
    return None


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the task process through /proc")
def test_submitit_requeues_a_signalled_job_which_continues(tmp_path, data_root):
    """The real chain on this machine with hydra/launcher=local (submitit, as on SLURM): the job's process gets
    SIGUSR2 mid-training (what SLURM sends signal_delay_s before the limit), saves last.ckpt, hands the signal to
    submitit, which requeues it; the new process continues in the same job dir from that checkpoint, in the same
    wandb run, and the sweep ends DONE with every step trained once."""

    command = [
        sys.executable,
        str(Path(__file__).parents[2] / "train.py"),
        "-m",
        "hydra/launcher=local",
        f"hydra.sweep.dir={tmp_path}/sweep",
        f"data.root={data_root}",
        "mode=full",
        "mode.max_steps=400",
        "mode.val_every=200",
        "mode.ckpt_every=1000",
        "mode.log_every=1",
        "mode.progress_bar=false",
        "data.size=64",
        "data.batch_size=8",
        "data.length=8",
        "preflight=false",
        "logger=wandb",
        *PROBES_OFF,
    ]
    # tiny steps: a second thread only waits on a busy machine
    process = start_command(*command, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    job, marker = tmp_path / "sweep" / "0", str(tmp_path / "sweep")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            if (job / "metrics.csv").is_file() and len(train_steps(job / "metrics.csv")) >= 10:
                break
            time.sleep(0.05)
        pid = task_pid(marker)
        assert pid is not None, "no submitit task process found"
        os.kill(pid, signal.SIGUSR2)
        out, err = process.communicate(timeout=300)
    finally:  # a failed test leaves no job running: the task, submitit's controller, train.py
        for pid in (task_pid(marker), process.pid):
            if pid is not None and process.poll() is None:
                os.kill(pid, signal.SIGKILL)
    assert process.returncode == 0, (out + err)[-3000:]
    verdict = read_verdict(job)
    assert verdict["status"] == "DONE" and verdict["steps"] == 400, verdict
    steps = train_steps(job / "metrics.csv")
    # every step trained once across the two processes, one row lost (the interrupted step's, see above)
    assert steps == sorted(set(steps)) and steps[-1] == 399 and len(steps) == 399, steps
    runs = wandb_run_ids(job)
    assert len(runs) == 2 and runs[0] == runs[1] == (job / "wandb/run_id").read_text().strip(), runs
    logs = "".join(p.read_text() for p in (tmp_path / "sweep" / ".submitit").rglob("*_log.*"))
    assert "Requeued job" in logs, logs[-3000:]
