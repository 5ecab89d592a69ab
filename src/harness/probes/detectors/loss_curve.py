"""The loss's rules, `LossRules`: `loss_spike` (a jump that stays or recurs), `divergence` (a climb that lasts)
and `no_progress` (the loss where it started, at a learning rate that should move it), read from every step's
loss, kept on the device between readings."""

from __future__ import annotations

import math
import statistics

import torch

from harness.probes.detectors.detector import RUNNING


class LossRules:
    """Mixed into the Symptoms probe: reads `losses`, `spike_events` and the thresholds, reports through it."""

    def defer_losses(self, step: int) -> None:
        """Queue the losses kept since the last reading to be read with the step's other values (one transfer)."""
        if self.pending_losses:
            losses = torch.stack([v.float().reshape(()) for v in self.pending_losses])
            self.pending_losses = []
            self.sink.defer(
                step, {"losses": losses}, lambda read: self.read_values.update({step: read["losses"]})
            )

    def read_losses(self, step: int, kept: bool = False) -> None:
        """Check the losses read up to `step` (and, `kept`, those still on the device: one transfer)."""
        batches = [(end, self.read_values.pop(end)) for end in sorted(self.read_values) if end <= step]
        if kept and self.pending_losses:
            batches.append((step, torch.stack([v.float().reshape(()) for v in self.pending_losses]).tolist()))
            self.pending_losses = []
        if not batches:
            return
        for end, values in batches:  # each batch of losses ends at the step that queued it
            for i, value in enumerate(values):
                self.check_spike(end - len(values) + 1 + i, value, now=step)
                self.check_divergence(end - len(values) + 1 + i, now=step)
        self.check_progress(step)

    def initial_loss(self) -> float | None:
        """The median of the first 5 finite losses, or None."""
        finite = [v for v in self.losses[:5] if math.isfinite(v)]
        return statistics.median(finite) if finite else None

    def check_spike(self, step: int, loss: float, now: int) -> None:
        """A spike: the loss far above its running median; a symptom once it stays `spike_stay` steps or
        recurs `spikes` times within `window`."""
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
        events = self.spike_events  # one that recovers at once is LM training's usual blip
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

    def check_divergence(self, step: int, now: int) -> None:
        """A climb: the loss's running median `diverge_rise` of the initial loss above the lowest it has been (the
        initial loss included) for `diverge_stay` steps in a row; named at the step the climb first held."""
        start = self.initial_loss()
        recent = [v for v in self.losses[-RUNNING:] if math.isfinite(v)]
        if self.steps_read < RUNNING or not start or start < 0 or len(recent) < RUNNING // 2:
            return
        # a spike shorter than half of it moves the running median not at all, one step's noise little
        median = statistics.median(recent)
        self.lowest = min(start if self.lowest is None else self.lowest, median)
        # scaled by the initial loss, not the lowest: a memorized loss near 0 that wobbles climbs nowhere
        if median - self.lowest <= self.diverge_rise * start:
            self.climb_start = None
            return
        self.climb_start = step if self.climb_start is None else self.climb_start
        stays = step - self.climb_start + 1
        if stays >= self.diverge_stay:
            detail = (
                f"the loss's running median ({RUNNING} steps) climbed from its lowest {self.lowest:.4g} to "
                f"{median:.4g} (initial loss {start:.4g}), over {self.diverge_rise:g}x the initial loss above it "
                f"for {stays} steps in a row"
            )
            self.report("divergence", self.climb_start, "train/loss", median, detail, now=now)

    def annealed(self) -> bool:
        """Whether the schedule holds the learning rate below a tenth of its base now (warmup, decay, zero)."""
        if self.lr is None or self.base_lr is None:
            return True
        return self.lr <= 0 or self.lr < 0.1 * self.base_lr

    def check_progress(self, step: int) -> None:
        """After `window` steps at a real learning rate, the loss within `progress` of where it started."""
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
