"""The loggers: `build_loggers` (metrics.csv always, via `MetricsCSV`, plus a tracker per `logger` entry, each
given the flat config and `tags`) and `finish_loggers`."""

from __future__ import annotations

import csv
import os
import secrets
import string
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import CSVLogger, Logger, TensorBoardLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment
from pytorch_lightning.utilities import rank_zero_only
from torch import Tensor

from harness.compat import rewrite_csv_header, tensorboard_file_writer
from harness.errors import ConfigError
from harness.ranks import global_rank

# each conf/logger/ option sits under its own key (`# @package logger.<name>`): logger=[tensorboard,wandb] composes
TRACKERS = ("csv", "tensorboard", "wandb", "mlflow")
#: the metrics TensorBoard's HPARAMS tab sets beside each run's hyperparameters (read from the run's scalars)
HP_METRICS = ("train/loss", "val/loss")


def build_loggers(cfg: DictConfig, run_dir: Path, resumed=None) -> list[Logger]:
    """metrics.csv, then a tracker per entry of `cfg.logger`; `resumed`: metrics.csv continued."""
    redo = (resumed.step, resumed.owed) if resumed is not None and resumed.here else None
    # flushed at every logged step: a run that dies midway leaves everything logged until then
    loggers: list[Logger] = [
        MetricsCSV(
            save_dir=run_dir,
            name="",
            version="",
            flush_logs_every_n_steps=1,
            keep=bool(resumed),
            redo=redo,
        )
    ]
    tags = [str(tag) for tag in cfg.get("tags") or []]
    for name, node in (cfg.get("logger") or {}).items():
        if not isinstance(node, DictConfig):
            raise ConfigError(
                f"logger.{name}",
                node,
                "each key under logger is one tracker's settings (logger.wandb.mode=offline); choose "
                "trackers with logger=wandb or logger=[tensorboard,wandb]",
            )
        tracker = _build_tracker(str(name), node, run_dir, tags)
        if tracker is not None:
            loggers.append(tracker)
    params = hyperparameters(cfg) if len(loggers) > 1 else {}
    for tracker in loggers[1:]:  # metrics.csv's run dir already has the config, in .hydra/config.yaml
        tracker.log_hyperparams(params)
    return loggers


def _build_tracker(name: str, node: DictConfig, run_dir: Path, tags: list[str]) -> Logger | None:
    """The tracker of the entry `logger.<name>`; None for csv (metrics.csv is always written)."""
    if name == "csv":
        return None
    if name == "tensorboard":
        return TensorBoard(save_dir=run_dir, name=node.get("name", "tensorboard"), version="")
    if name == "wandb":
        return wandb_logger(node, run_dir, tags)
    if name == "mlflow":
        return mlflow_logger(node, run_dir, tags)
    if "_target_" in node:
        from harness.config import build

        return build(node, f"logger.{name}")
    raise ConfigError(
        f"logger.{name}",
        OmegaConf.to_container(node),
        f"no such tracker; choose among {', '.join(TRACKERS)} (logger=[csv,wandb]), or give a fork's own "
        "a _target_ (a Lightning Logger class)",
    )


def wandb_logger(node: DictConfig, run_dir: Path, tags: list[str]) -> Logger:
    """wandb, offline unless told; its run id kept in `run_dir/wandb/run_id` for a job restarted there."""
    os.environ["WANDB_MODE"] = node.mode  # before wandb is imported: offline means no network at all
    os.environ.setdefault("WANDB_SILENT", "true")
    from pytorch_lightning.loggers import WandbLogger

    kept = run_dir / "wandb" / "run_id"
    run_id = node.get("id") or (kept.read_text().strip() if kept.is_file() else None)
    # wandb's own alphabet and length for run ids
    run_id = run_id or "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    if global_rank() == 0:  # DDP ranks share the run dir; only rank 0 starts a wandb run
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(run_id + "\n")
    return WandbLogger(
        save_dir=str(run_dir),
        project=node.project,
        entity=node.entity,
        name=node.run_name,
        group=node.group,
        tags=[*tags, *(str(tag) for tag in node.get("tags") or [])],
        offline=node.mode == "offline",
        id=run_id,
        resume="allow",  # the id of a run that exists: continue it
    )


def mlflow_logger(node: DictConfig, run_dir: Path, tags: list[str]) -> Logger:
    """MLflow in a SQLite store in the run dir unless given a tracking_uri; the run id kept as wandb's is."""
    os.environ.setdefault(
        "MLFLOW_LOGGING_LEVEL", "WARNING"
    )  # before mlflow is imported: no lines per table made
    from pytorch_lightning.loggers import MLFlowLogger

    # not MLflow's `file:` store: MLflow 3 refuses it, and it cannot hold a metric whose name extends another's
    # (the probes log logit/p_correct and logit/p_correct/example_0)
    kept = run_dir / "mlflow_run_id"
    logger = MLFlowLogger(
        experiment_name=node.experiment,
        run_name=node.run_name,
        tracking_uri=node.tracking_uri or f"sqlite:///{run_dir / 'mlflow.db'}",
        artifact_location=None if node.tracking_uri else str(run_dir / "mlartifacts"),
        tags={tag: "true" for tag in tags},  # MLflow's tags are key=value: search with tags.<tag> = 'true'
        run_id=kept.read_text().strip() if kept.is_file() else None,
    )
    if global_rank() == 0:  # the run is created here rather than at the first log
        kept.write_text(logger.run_id + "\n")
    return logger


def hyperparameters(cfg: DictConfig) -> dict:
    """The composed config (Hydra's own settings left out) as one flat dict: {"model.d_model": 64, ...}."""
    tree = OmegaConf.to_container(cfg, resolve=True)
    tree.pop("hydra", None)
    flat: dict = {}

    def walk(node, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    walk(tree, "")
    return flat


class TensorBoard(TensorBoardLogger):
    """Lightning's TensorBoardLogger, HPARAMS shown beside train/loss and val/loss (no `hp_metric`)."""

    def __init__(self, save_dir: Path, name: str, version: str):
        super().__init__(save_dir=save_dir, name=name, version=version, default_hp_metric=False)

    @rank_zero_only
    def log_hyperparams(self, params, metrics=None, step=None) -> None:
        super().log_hyperparams(params, metrics=metrics, step=step)  # hparams.yaml; no metrics: no summary
        if metrics is not None:
            return
        from torch.utils.tensorboard.summary import hparams

        # the values of the metric dict are not written: the tab reads these tags from the run's scalars
        summaries = hparams(self._sanitize_params(params), dict.fromkeys(HP_METRICS, 0.0))
        writer = tensorboard_file_writer(self.experiment)
        for summary in summaries:
            writer.add_summary(summary)


class MetricsWriter(ExperimentWriter):
    """Lightning's metrics.csv, same layout, at a cost per row of its own keys; floats to 9 significant
    digits."""

    def __init__(self, log_dir: str, keep: bool = False, redo: tuple[int, bool] | None = None):
        """`keep`: append to the metrics.csv there; `redo` (step, validation owed): rows done again dropped."""
        path = Path(log_dir) / self.NAME_METRICS_FILE
        aside = path.with_name(path.name + ".resumed")
        if keep and path.is_file():
            os.replace(path, aside)
        super().__init__(log_dir)
        self.column: dict[str, int] = {}  # key -> its column in the current header
        self.file = None
        if aside.is_file():
            if redo is not None:
                _drop_redone(aside, *redo)
            os.replace(aside, path)
            with open(path, newline="") as f:
                self.metrics_keys = next(csv.reader(f), [])
            self.column = {key: i for i, key in enumerate(self.metrics_keys)}

    def log_metrics(self, metrics_dict: dict, step: int | None = None) -> None:
        """Lightning's, with a fast path for plain floats (what the probes log: ~100 keys a step)."""
        metrics = {k: v if type(v) is float else self._value(v) for k, v in metrics_dict.items()}
        metrics["step"] = len(self.metrics) if step is None else step
        self.metrics.append(metrics)

    @staticmethod
    def _value(value):
        return value.item() if isinstance(value, Tensor) else value

    def save(self) -> None:
        if not self.metrics:
            return
        new_keys = set().union(*self.metrics).difference(self.column)
        if new_keys:
            self.close()
            self.metrics_keys = sorted([*self.metrics_keys, *new_keys])
            self.column = {key: i for i, key in enumerate(self.metrics_keys)}
            if os.path.isfile(self.metrics_file_path):
                rewrite_csv_header(self, self.metrics_keys)
            else:
                with open(self.metrics_file_path, "w", newline="") as file:
                    csv.writer(file).writerow(self.metrics_keys)
        if self.file is None:
            self.file = open(self.metrics_file_path, "a", newline="")  # noqa: SIM115 -- kept open: see close
            self.writer = csv.writer(self.file)
        # the probes make the file wide and sparse (~1,000 columns, most empty): a copy of a blank row with its
        # keys filled in, appended to a file kept open, where Lightning's DictWriter visits every column
        blank = [""] * len(self.column)
        rows = []
        for metrics in self.metrics:
            row = blank.copy()
            for key, value in metrics.items():
                row[self.column[key]] = f"{value:.9g}" if type(value) is float else value
            rows.append(row)
        self.writer.writerows(rows)
        self.file.flush()
        self.metrics = []

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _drop_redone(path: Path, step: int, owed: bool) -> None:
    """Rewrite metrics.csv less what a run resumed at `step` logs again, and a row a kill cut short."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, kept = rows[:1], []
    where = header[0].index("step") if header and "step" in header[0] else None
    validation = [i for i, key in enumerate(header[0] if header else []) if key.startswith("val/")]
    for row in rows[1:]:
        try:
            logged = int(row[where])
        except (TypeError, IndexError, ValueError):  # no step column, or a line cut short
            continue
        if len(row) != len(header[0]) or logged >= step:
            continue
        if owed and logged == step - 1 and any(row[i] for i in validation):
            continue
        kept.append(row)
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(header + kept)


class MetricsCSV(CSVLogger):
    """Lightning's CSVLogger writing through MetricsWriter; `keep` and `redo` as MetricsWriter's."""

    def __init__(self, *args, keep: bool = False, redo: tuple[int, bool] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.keep, self.redo = keep, redo

    @property
    @rank_zero_experiment  # other DDP ranks write nothing
    def experiment(self) -> MetricsWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = MetricsWriter(log_dir=self.log_dir, keep=self.keep, redo=self.redo)
        return self._experiment

    def finalize(self, status: str) -> None:
        super().finalize(status)
        if self._experiment is not None:
            self._experiment.close()


def finish_loggers(loggers: list[Logger], status: str) -> None:
    """Finish what was opened, also after an error (a wandb run left open hangs the next one)."""
    for logger in loggers:
        logger.finalize(status)
        if type(logger).__name__ == "WandbLogger":
            import wandb

            wandb.finish(exit_code=0 if status == "success" else 1)
