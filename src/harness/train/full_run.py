"""mode=full, real training: `Full`, the mode object harness.tasks.training asks what differs by mode (data,
callbacks, judging, summary line), as overfit.Overfit is for mode=overfit."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl

from harness.report.speed_section import speed_line, wall_phrase
from harness.train.checkpoints import FinalCheckpoint


class Full:
    """mode=full: shuffled batches, validation, checkpoints; DONE when its steps are."""

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
        # a run resumed at its last step validated before it was stopped: its checkpoint kept the metrics
        metrics = {**module.resumed_metrics, **{k: v.item() for k, v in trainer.callback_metrics.items()}}
        verdict.status = "DONE"
        verdict.final_loss = module.final_loss()
        verdict.val_loss = metrics.get("val/loss")
        verdict.accuracy = metrics.get("val/acc")
        verdict.p_correct = metrics.get("val/p_correct")

    def summary(self, verdict) -> str:
        perf = verdict.items.get("perf")
        speed = speed_line(perf)  # the speed's medians (harness.train.perf.speed)
        val = verdict.val_loss
        # a run shorter than mode.val_every ends before its first validation
        val = f"val loss {val:.4g}" if isinstance(val, (int, float)) else "no validation ran"
        return f"DONE: {verdict.steps} steps, {val}, {wall_phrase(perf, verdict.seconds)}{'; ' * bool(speed)}{speed}"
