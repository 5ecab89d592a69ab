"""Loggers: metrics.csv in the run dir always, plus the experiment tracker the config names.

wandb is imported only when chosen, after WANDB_MODE is set, so an offline run never touches the network."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig
from pytorch_lightning.loggers import CSVLogger, Logger

from harness.errors import ConfigError

TRACKERS = ("none", "csv", "tensorboard", "wandb")


def build_loggers(cfg: DictConfig, run_dir: Path) -> list[Logger]:
    """CSV into `run_dir/metrics.csv`, then the tracker of `cfg` (the `logger` config group)."""
    # flushed at every logged step: a run that dies midway leaves everything logged until then
    loggers: list[Logger] = [CSVLogger(save_dir=run_dir, name="", version="", flush_logs_every_n_steps=1)]
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
    elif name not in ("none", "csv"):
        raise ConfigError("logger.name", name, f"choose one of {', '.join(TRACKERS)}")
    return loggers


def finish_loggers(loggers: list[Logger], status: str) -> None:
    """Finish what was opened, also after an error (a wandb run left open hangs the next one)."""
    for logger in loggers:
        logger.finalize(status)
        if type(logger).__name__ == "WandbLogger":
            import wandb

            wandb.finish(exit_code=0 if status == "success" else 1)
