"""The run modes: what differs between memorizing n examples and real training, behind one object, so
harness.run takes the branch once. Each mode gives the data the trainer sees, its callbacks, how the run
is judged and its summary line; overfit mode lives with its parts in harness.overfit."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl

from harness.faults import FinalCheckpoint
from harness.overfit import Overfit


class Full:
    """mode=full: real training on shuffled batches, validation, checkpoints (best by val/loss, last
    every mode.ckpt_every steps); the run is DONE when its steps are."""

    name = "full"

    def __init__(self, cfg):
        self.cfg = cfg

    def data(self, base: pl.LightningDataModule) -> pl.LightningDataModule:
        return base

    def callbacks(self, data, verdict, checkpoints: Path) -> list[pl.Callback]:
        every = self.cfg.mode.ckpt_every
        return [  # best by validation loss, and last every `every` steps (a hard kill loses less)
            pl.callbacks.ModelCheckpoint(
                dirpath=checkpoints, filename="best", monitor="val/loss", mode="min"
            ),
            pl.callbacks.ModelCheckpoint(
                dirpath=checkpoints, filename="last", every_n_train_steps=every, enable_version_counter=False
            ),
            FinalCheckpoint(checkpoints / "last.ckpt", every),
        ]

    def judge(self, verdict, trainer: pl.Trainer, module, checkpoints: Path) -> None:
        metrics = {k: v.item() for k, v in trainer.callback_metrics.items()}
        verdict.status = "DONE"
        verdict.final_loss = module.final_loss()
        verdict.val_loss = metrics.get("val/loss")
        verdict.accuracy = metrics.get("val/acc")
        verdict.p_correct = metrics.get("val/p_correct")

    def summary(self, verdict) -> str:
        return f"DONE: {verdict.steps} steps, val loss {verdict.val_loss}, {verdict.seconds:.1f} s"


#: mode.name -> its mode object's class
MODES = {"overfit": Overfit, "full": Full}


def mode_for(cfg):
    """The mode object of `cfg.mode.name` (harness.config.validate has refused any other name)."""
    return MODES[cfg.mode.name](cfg)
