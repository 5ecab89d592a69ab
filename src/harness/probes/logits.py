"""Logit mass at the masked positions: the probability on the correct token, the entropy and the top-1 mass.

Read from the (detached) logits the training step returns: no second forward pass. In overfit mode also
per example, and `p_correct.png` at the end: one line per example, rising from 1/vocab to 1 as the model
memorizes (practice P1: "visibly move from spread-out to concentrated"). Axes: b batch, time positions, vocab."""

from __future__ import annotations

import logging
from pathlib import Path

import pytorch_lightning as pl
import torch

from harness.module import step_stats
from harness.probes.emit import MetricSink, due, has_tracker, log_image

log = logging.getLogger(__name__)


def logit_mass(stats: torch.Tensor, loss_mask: torch.Tensor, per_example: bool) -> torch.Tensor:
    """Float[3 (+ b)]: p(correct), entropy (nats) and top-1 mass over the batch's masked positions (positions
    averaged, as train/ does), then, with `per_example`, each example's p(correct), from the step's
    position_stats (harness.module). Stays on the device."""
    mask = loss_mask.float()
    sums = (stats[:3] * mask).sum(dim=-1)  # [stat, b]
    counts = mask.sum(dim=-1)
    overall = sums.sum(dim=-1) / counts.sum().clamp_min(1)
    return torch.cat([overall, sums[0] / counts.clamp_min(1)]) if per_example else overall


class LogitMass(pl.Callback):
    """`logit/p_correct`, `logit/entropy`, `logit/top1` every `every` steps; with `per_example` also
    `logit/p_correct/example_<i>`, and (with `plots`) `p_correct.png` in `run_dir` at the end of training."""

    def __init__(self, sink: MetricSink, every: int, per_example: bool, run_dir: Path, plots: bool = True):
        self.sink, self.every, self.per_example, self.run_dir = sink, every, per_example, Path(run_dir)
        self.plots = plots
        self.history: list[tuple[int, list[float], float, float]] = []  # step, p per example, entropy, top1
        self.warned = False
        self.step = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.step = trainer.global_step  # the step Lightning files this batch's metrics under

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = self.step
        if not trainer.is_global_zero or not due(step, self.every):
            return
        logits = outputs.get("logits") if isinstance(outputs, dict) else None
        if logits is None:
            if not self.warned:
                log.warning(
                    "logit probe off: training_step returns no 'logits' (return them detached in its dict)"
                )
                self.warned = True
            return
        values = logit_mass(step_stats(outputs, batch), batch["loss_mask"], self.per_example).tolist()
        metrics = {"logit/p_correct": values[0], "logit/entropy": values[1], "logit/top1": values[2]}
        per_example = values[3:]
        metrics.update({f"logit/p_correct/example_{i}": p for i, p in enumerate(per_example)})
        self.sink.add(step, metrics)
        if self.per_example:
            self.history.append((step, per_example, values[1], values[2]))

    def on_train_end(self, trainer, pl_module) -> None:
        tracker = has_tracker(trainer)
        if not (trainer.is_global_zero and self.per_example and self.history and (self.plots or tracker)):
            return
        from harness.probes.plots import p_correct_figure, save, to_rgb

        figure = p_correct_figure(self.history)
        if self.plots:
            save(figure, self.run_dir / "p_correct.png")
        if tracker:
            log_image(trainer, "logit/p_correct_per_example", to_rgb(figure), trainer.global_step)
