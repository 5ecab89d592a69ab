"""Loggers: metrics.csv in the run dir always, plus the experiment tracker the config names.

wandb is imported only when chosen, after WANDB_MODE is set, so an offline run never touches the network."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from omegaconf import DictConfig
from pytorch_lightning.loggers import CSVLogger, Logger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment
from torch import Tensor

from harness.compat import rewrite_csv_header
from harness.errors import ConfigError

TRACKERS = ("csv", "tensorboard", "wandb")


def build_loggers(cfg: DictConfig, run_dir: Path) -> list[Logger]:
    """CSV into `run_dir/metrics.csv`, then the tracker of `cfg` (the `logger` config group)."""
    # flushed at every logged step: a run that dies midway leaves everything logged until then
    loggers: list[Logger] = [MetricsCSV(save_dir=run_dir, name="", version="", flush_logs_every_n_steps=1)]
    name = cfg.name
    if name == "tensorboard":
        from pytorch_lightning.loggers import TensorBoardLogger

        loggers.append(
            TensorBoardLogger(save_dir=run_dir, name="tensorboard", version="", default_hp_metric=False)
        )
    elif name == "wandb":
        os.environ["WANDB_MODE"] = cfg.mode  # before wandb is imported: offline means no network at all
        os.environ.setdefault("WANDB_SILENT", "true")
        from pytorch_lightning.loggers import WandbLogger

        loggers.append(
            WandbLogger(
                save_dir=str(run_dir),
                project=cfg.project,
                entity=cfg.entity,
                name=cfg.run_name,
                group=cfg.group,
                tags=list(cfg.tags or []),
                offline=cfg.mode == "offline",
            )
        )
    elif name != "csv":
        raise ConfigError("logger.name", name, f"choose one of {', '.join(TRACKERS)}")
    return loggers


class MetricsWriter(ExperimentWriter):
    """Lightning's metrics.csv, same layout (a column per key, sorted; a row per log call; the file rewritten
    when a key is new), written at a cost per row of the row's own keys rather than of the file's width.

    The probes make the file wide and sparse (~1,000 columns for a small model, most empty in a given row):
    Lightning's DictWriter visits every column of every row in Python, and opens the file at every save
    (every logged step here): more than most probes cost a tiny model (docs/performance.md). Here a row is a copy of
    a blank row with its own keys filled in, appended to a file kept open and flushed at every save (a
    killed run keeps every row saved). Floats are written with 9 significant digits, which give back every
    float32 exactly (what metrics are computed in), cheaper than Python's 17."""

    def __init__(self, log_dir: str):
        super().__init__(log_dir)
        self.column: dict[str, int] = {}  # key -> its column in the current header
        self.file = None

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


class MetricsCSV(CSVLogger):
    """Lightning's CSVLogger writing through MetricsWriter (metrics.csv and hparams.yaml in the run dir)."""

    @property
    @rank_zero_experiment  # other DDP ranks write nothing
    def experiment(self) -> MetricsWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = MetricsWriter(log_dir=self.log_dir)
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
