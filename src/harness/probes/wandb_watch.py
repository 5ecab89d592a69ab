"""`probes.wandb_watch=true`: wandb's own `wandb.watch(model, log="all", log_freq=10)`, `WandbWatch`. It syncs
the host once per tensor per logged step; the harness's probes give the same picture cheaper."""

from __future__ import annotations

import logging

from pytorch_lightning.loggers import WandbLogger

from harness.config.groups.probes import WatchKeys
from harness.probes.probe import Probe, checked_declared, off_when_sharded

log = logging.getLogger(__name__)


class WandbWatch(Probe):
    """Calls wandb.watch(model, log=`log`, log_freq=`every`) at fit start where wandb logs (else warns)."""

    def __init__(self, every: int = 10, log: str = "all"):
        super().__init__(checked_declared(WatchKeys, "every", every))
        self.log = log
        self.watched = None

    def on_fit_start(self, trainer, pl_module) -> None:
        logger = next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)
        if logger is None:
            log.warning("probes.wandb_watch=true is ignored: the wandb logger is not active (logger=wandb)")
            return
        why = (
            "wandb.watch reads each tensor on rank 0, which holds one slice of every weight and gradient; the "
            "norms and histograms probes report the whole layers"
        )
        if off_when_sharded(trainer, pl_module, "probes.wandb_watch", why):
            return
        if trainer.is_global_zero:
            import wandb

            logger.experiment  # noqa: B018 -- starts the wandb run that wandb.watch attaches to
            self.watched = pl_module.model
            wandb.watch(self.watched, log=self.log, log_freq=self.every)

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.watched is not None:
            import wandb

            wandb.unwatch(self.watched)
            self.watched = None
