"""`probes.wandb_watch=true`: wandb's own `wandb.watch(model, log="all", log_freq=10)`, for those who want it.

It syncs the host once per tensor per logged step (see bench/probes.py for what that costs); the harness's own
probes give the same per-layer picture through any logger, cheaper."""

from __future__ import annotations

import logging

import pytorch_lightning as pl
from pytorch_lightning.loggers import WandbLogger

log = logging.getLogger(__name__)


class WandbWatch(pl.Callback):
    """Calls wandb.watch on the model at the start of fit when the wandb logger is active (else warns)."""

    def __init__(self, log_what: str = "all", log_freq: int = 10):
        self.log_what, self.log_freq = log_what, log_freq
        self.watched = None

    def on_fit_start(self, trainer, pl_module) -> None:
        logger = next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)
        if logger is None:
            log.warning("probes.wandb_watch=true is ignored: the wandb logger is not active (logger=wandb)")
            return
        if trainer.is_global_zero:
            import wandb

            logger.experiment  # noqa: B018 -- starts the wandb run that wandb.watch attaches to
            self.watched = pl_module.model
            wandb.watch(self.watched, log=self.log_what, log_freq=self.log_freq)

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.watched is not None:
            import wandb

            wandb.unwatch(self.watched)
            self.watched = None
