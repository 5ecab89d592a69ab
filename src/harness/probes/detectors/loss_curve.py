"""The loss's rules: `loss_spike` (a jump that stays or recurs) and `no_progress` (the loss where it started,
at a learning rate that should move it). The loss is kept on the device every optimizer step and read every
`every` steps, in one transfer."""

from __future__ import annotations

import math
import statistics

import torch

from harness.probes.detectors.detector import RUNNING


class LossRules:
    """Mixed into the Symptoms probe: reads `losses`, `spike_events`, the thresholds, and reports through it."""

    def read_losses(self, step: int) -> None:
        if not self.pending_losses:
            return
        values = torch.stack([v.float().reshape(()) for v in self.pending_losses]).tolist()
        self.pending_losses = []
        for i, value in enumerate(values):
            self.check_spike(step - len(values) + 1 + i, value, now=step)
        self.check_progress(step)

    def initial_loss(self) -> float | None:
        finite = [v for v in self.losses[:5] if math.isfinite(v)]
        return statistics.median(finite) if finite else None

    def check_spike(self, step: int, loss: float, now: int) -> None:
        """A spike: the loss `spike_factor` times its running median, above it by `spike_min` x the initial loss
        and by `spike_sigmas` robust standard deviations of the running window (batch-to-batch noise is no spike).
        Consecutive spike steps are one event; the symptom is an event that stays (`spike_stay` steps) or one
        that recurs (`spikes` events within `window` steps). One that recovers at once is LM training's usual
        blip (a GPT warming up on synthetic data has one)."""
        recent = [v for v in self.losses[-RUNNING:] if math.isfinite(v)]
        self.losses.append(loss)
        self.steps_read += 1
        if len(self.losses) > 5 + self.window + RUNNING:  # the first 5 and the latest: all the rules read
            del self.losses[5 : 5 + self.window]
        start = self.initial_loss()
        if len(recent) < 10 or start is None or not math.isfinite(loss):
            return
        median = statistics.median(recent)
        if not (median > 0 and loss > self.spike_factor * median and loss - median > self.spike_min * start):
            return
        spread = 1.4826 * statistics.median(abs(v - median) for v in recent)  # a robust standard deviation
        if loss - median <= self.spike_sigmas * spread:
            return
        events = self.spike_events
        if events and events[-1][1] == step - 1:
            events[-1][1] = step  # the same event goes on
        else:
            events.append([step, step])
        self.spike_events = events = [e for e in events if e[1] > step - self.window]
        stays = events[-1][1] - events[-1][0] + 1
        if stays >= self.spike_stay or len(events) >= self.spikes:
            how = (
                f"for {stays} steps in a row"
                if stays >= self.spike_stay
                else f"{len(events)} times within {self.window} steps"
            )
            detail = (
                f"the loss jumped to {loss:.4g}, {loss / median:.1f}x its running median {median:.4g}, {how}"
            )
            self.report("loss_spike", events[0][0], "train/loss", loss, detail, now=now)

    def annealed(self) -> bool:
        """Whether the schedule holds the learning rate below a tenth of its base now (warmup, decay, zero)."""
        if self.lr is None or self.base_lr is None:
            return True
        return self.lr <= 0 or self.lr < 0.1 * self.base_lr

    def check_progress(self, step: int) -> None:
        start = self.initial_loss()
        if self.steps_read < self.window or not start:
            return
        if self.annealed():  # warming up or annealed: not the optimizer's fault
            return
        now = [v for v in self.losses[-10:] if math.isfinite(v)]
        if not now:
            return
        moved = (start - statistics.median(now)) / start
        if abs(moved) < self.progress:
            detail = (
                f"after {self.steps_read} steps the loss is {statistics.median(now):.4g}, {abs(moved):.1%} from "
                f"where it started ({start:.4g}), at learning rate {self.lr:.3g}"
            )
            self.report("no_progress", step, "train/loss", moved, detail)
