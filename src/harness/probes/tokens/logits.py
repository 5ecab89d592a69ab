"""`LogitMass`: p(correct token), entropy and top-1 mass at the masked positions, from the logits the step
returns; per example and p_correct.png in overfit mode (practice P1). Axes: b, time, vocab."""

from __future__ import annotations

import logging

import torch

from harness.compat import lightning_logs_now
from harness.config.groups.probes import check_logit_period
from harness.probes.probe import Probe
from harness.probes.trackers import has_tracker, log_image
from harness.train.module import step_stats

log = logging.getLogger(__name__)


def _logit_mass(stats: torch.Tensor, loss_mask: torch.Tensor, per_example: bool) -> torch.Tensor:
    """Float[3 (+ b)]: p(correct), entropy, top-1 mass over the masked positions, then each example's
    p(correct)."""
    mask = loss_mask.float()
    sums = (stats[:3] * mask).sum(dim=-1)  # [stat, b]
    counts = mask.sum(dim=-1)
    overall = sums.sum(dim=-1) / counts.sum().clamp_min(1)
    return torch.cat([overall, sums[0] / counts.clamp_min(1)]) if per_example else overall


class LogitMass(Probe):
    """`logit/p_correct`, `entropy`, `top1` with the run's metrics (`every`="log") or every `every` steps."""

    def __init__(self, every: int | str | None = "log"):
        check_logit_period("every", every)
        self.with_metrics = every == "log"
        super().__init__(1 if self.with_metrics else every)
        self.history: list[tuple[int, list[float], float, float]] = []  # step, p per example, entropy, top1
        self.warned = False
        self.step = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.step = trainer.global_step  # the step Lightning files this batch's metrics under

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = self.step
        due = lightning_logs_now(trainer) if self.with_metrics else self.due(step)
        if not trainer.is_global_zero or not due:
            return
        logits = outputs.get("logits") if isinstance(outputs, dict) else None
        if logits is None:
            if not self.warned:
                log.warning(
                    "logit probe off: training_step returns no 'logits' (return them detached in its dict)"
                )
                self.warned = True
            return
        per_example = self.run.overfit
        mass = _logit_mass(step_stats(outputs, batch), batch["loss_mask"], per_example)
        self.sink.defer(step, {"mass": mass}, lambda read: self._read(step, read["mass"], per_example))

    def _read(self, step: int, values: list[float], per_example: bool) -> None:
        metrics = {"logit/p_correct": values[0], "logit/entropy": values[1], "logit/top1": values[2]}
        examples = values[3:]
        metrics.update({f"logit/p_correct/example_{i}": p for i, p in enumerate(examples)})
        self.sink.add(step, metrics)
        if per_example:
            self.history.append((step, examples, values[1], values[2]))

    def on_train_end(self, trainer, pl_module) -> None:
        tracker, path = has_tracker(trainer), self.run.file("p_correct.png", plot=True)
        if not (trainer.is_global_zero and self.history and (path or tracker)):
            return
        from harness.probes.figures import p_correct_figure, save_figure, to_rgb

        figure = p_correct_figure(self.history)
        if path:
            save_figure(figure, path)
        if tracker:
            log_image(trainer, "logit/p_correct_per_example", to_rgb(figure), trainer.global_step)
