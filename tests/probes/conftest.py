"""What the probe tests share: a run's metrics.csv read back by step, and a bare Lightning fit of a HarnessModule on
a few random batches with each step's gradient and weight norms taken by torch itself (NormRecorder)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from harness.probes.layers.norms import parameter_names
from harness.train.module import HarnessModule


def _rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _by_step(rows: list[dict], key: str) -> dict[int, float]:
    return {int(r["step"]): float(r[key]) for r in rows if r.get(key) not in (None, "")}


class NormRecorder(pl.Callback):
    """Each step's gradient and weight norms, taken by torch itself where the optimizer reads them, apart from
    any probe (0 for a missing gradient)."""

    def __init__(self):
        self.grads: dict[int, dict[str, float]] = {}
        self.weights: dict[int, dict[str, float]] = {}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        named = parameter_names(pl_module)
        step = trainer.global_step
        self.grads[step] = {n: 0.0 if p.grad is None else p.grad.norm().item() for n, p in named}
        self.weights[step] = {n: p.detach().norm().item() for n, p in named}


def _fit(module: HarnessModule, callbacks: list, batches: list, logger, **trainer_args) -> pl.Trainer:
    """Fit `module` on `batches` (one epoch, no validation unless `trainer_args` ask for it)."""
    trainer = pl.Trainer(
        max_steps=len(batches),
        callbacks=callbacks,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **{"limit_val_batches": 0, "log_every_n_steps": 1, **trainer_args},
    )
    loader = DataLoader(batches, batch_size=None)
    trainer.fit(module, train_dataloaders=loader, val_dataloaders=loader)
    return trainer


def _batches(vocab: int, steps: int) -> list[dict]:
    ids = torch.randint(0, vocab, (steps, 2, 7))
    mask = torch.ones(2, 6, dtype=torch.bool)
    return [{"input_ids": x[:, :-1], "targets": x[:, 1:], "loss_mask": mask} for x in ids]
