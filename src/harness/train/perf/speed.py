"""The run's speed, `Speed`: tokens, examples and steps a second, MFU (never above 1: a CPU's peak raised, else a
fault named), where the training loop's time goes, logged as perf/... on the logging steps through the readout;
verdict.json's `perf`; the `data_wait` symptom."""

from __future__ import annotations

import functools
import logging
import statistics
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf

from harness.compat import lightning_logs_now
from harness.config import build
from harness.report.symptoms import Symptom
from harness.train.distributed.shard_sums import reduce
from harness.train.nonfinite import NonFiniteGuard
from harness.train.perf.flops import batch_flops
from harness.train.perf.peak import device_peak, precision_dtype, raise_peak
from harness.train.perf.readout import readout_of
from harness.train.perf.timeline import PHASES, FetchClock, Timeline, Wrapped

log = logging.getLogger(__name__)

#: the speed figures of a logging step, metrics.csv's perf/<name> and the verdict's perf.<name> (their median)
FIGURES = ("tokens_per_s", "loss_tokens_per_s", "examples_per_s", "step_s", "mfu")
#: where the callbacks whose hooks are timed as `harness` come from (with the non-finite guard)
HARNESS_OWN = ("harness.probes.", "harness.checks.")


@dataclass
class Window:
    """What the steps between two logging steps did: the first step, the logging step, optimizer steps, batches,
    examples and positions (this rank's)."""

    first: int
    step: int = 0
    steps: int = 0
    batches: int = 0
    examples: int = 0
    positions: int = 0


def speed_callbacks(cfg) -> list[pl.Callback]:
    """conf/perf/'s Speed, built from its `_target_`; [] where `perf` is null or perf.enabled=false."""
    node = cfg.get("perf")
    if node is None:
        return []
    arguments = OmegaConf.to_container(node, resolve=True)
    return [build(OmegaConf.create(arguments), "perf")] if arguments.pop("enabled", True) else []


class Speed(pl.Callback):
    """Speed figures and the time split of every logging step (perf/...), their medians for the verdict, and the
    data_wait symptom. The first of the callbacks: each of its marks opens a round of Lightning's hooks.

    The verdict's medians leave out the logging steps whose window holds any of the run's first `warmup` steps
    (compilation, the allocator's first requests, the FLOP count, the loader's workers starting); a run that
    logged no other takes them all."""

    def __init__(
        self,
        flops: bool = True,
        peak_flops: float | None = None,
        peak_cache: str = "perf_peaks.json",
        warmup: int = 5,
        data_wait: float = 0.3,
        window: int = 50,
    ):
        self.count_flops, self.peak_flops, self.peak_cache = flops, peak_flops, Path(peak_cache)
        self.warmup, self.data_wait, self.window = warmup, data_wait, window
        self.timeline: Timeline | None = None  # while fitting
        self.readout = self.wrapped = self.fetches = None
        self.flops: int | None = None  # a batch's, forward and backward
        self.flops_counted = False
        self.peak: float | None = None
        self.peak_source, self.dtype, self.accumulate = "", "", 1
        self.mfu_fault: str | None = None  # why no MFU is given: the steps' rate above the peak
        self.loop: tuple | None = None  # the loop's start and end (epoch seconds), its phases' seconds
        self.start = self.seen = 0  # the run's first step; the global step at the latest batch's end
        self.current = Window(0)
        self.masks: list[torch.Tensor] = []  # this window's loss masks, counted at its logging step
        self.rows: list[tuple[Window, dict, dict]] = []  # a logging step's window, figures, phases' seconds
        self.waits: deque = deque()  # (steps, data_wait seconds, seconds) of the windows past the warm-up
        self.reported = self.unseen_fetches = False
        self.before_validation = "setup"  # the phase a validation interrupts

    def on_fit_start(self, trainer, pl_module) -> None:
        self.readout = readout_of(trainer)
        if self.readout is None:
            log.warning("perf: no Readout among the Trainer's callbacks: no speed figures for this run")
            return
        self.timeline = Timeline(pl_module.device)
        self.loop = (time.time(), 0.0, {})
        self.wrapped = Wrapped(self.timeline)
        for callback in trainer.callbacks:
            if isinstance(callback, NonFiniteGuard) or type(callback).__module__.startswith(HARNESS_OWN):
                self.wrapped.hooks(callback, "harness")
        self.wrapped.method(trainer, "save_checkpoint", "checkpoint")
        self.fetches = FetchClock(self.timeline, trainer.profiler)

    def on_train_start(self, trainer, pl_module) -> None:
        if self.timeline is None:
            return
        self.start = self.seen = trainer.global_step
        self.current = Window(self.start)
        self.accumulate = trainer.accumulate_grad_batches
        self.dtype = precision_dtype(trainer.precision, pl_module.device.type)
        # the figures are logged on rank 0 alone; a CPU's peak is measured there once, before any step
        if trainer.is_global_zero:
            self.peak, self.peak_source = device_peak(
                pl_module.device, self.dtype, self.peak_flops, self.peak_cache
            )
            if self.peak is None:
                log.info("perf: no perf/mfu: %s", self.peak_source)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.timeline is None:
            return
        if self.count_flops and not self.flops_counted:
            self._count_flops(trainer, pl_module, batch)
        if isinstance(batch, dict) and isinstance(batch.get("input_ids"), torch.Tensor):
            ids, mask = batch["input_ids"], batch.get("loss_mask")
            self.current.batches += 1
            self.current.examples += ids.shape[0]
            self.current.positions += ids.numel()
            if isinstance(mask, torch.Tensor):  # no op a step: counted on the device at the logging step
                self.masks.append(mask)
        self.timeline.switch("forward_backward")

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.timeline is not None:
            self.timeline.switch("optimizer")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.timeline is None:
            return
        self.timeline.switch("other")
        step = trainer.global_step
        before, self.seen = self.seen, step
        if step == before or not lightning_logs_now(trainer):
            return  # a micro-batch of a step that goes on, or a step Lightning writes nothing of
        self.timeline.close()
        window, self.current = self.current, Window(step)
        window.step, window.steps = step - 1, step - window.first  # the step its metrics are filed under
        tokens, self.masks = _counted(self.masks, pl_module.device), []
        if trainer.world_size > 1:  # every rank's: one all-reduce a logging step
            tokens = reduce(tokens)
        self.readout.defer(
            window.step, {"loss_tokens": tokens}, functools.partial(self._read, trainer, window)
        )

    def on_train_end(self, trainer, pl_module) -> None:
        if self.timeline is not None:  # the last step is over: what follows is the fit's end
            self.timeline.switch("finish")

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.timeline is not None:
            self.before_validation = self.timeline.switch("validation")

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.timeline is not None:
            self.timeline.switch(self.before_validation)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.teardown(trainer, pl_module, "fit")

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.timeline is None:
            return
        self.loop = (self.loop[0], time.time(), self.timeline.finish())
        self.wrapped.restore()
        self.fetches.detach()
        self.timeline = None

    def _count_flops(self, trainer, pl_module, batch) -> None:
        """A batch's FLOPs, counted on the plain model at the first batch (compile=true: not the compiled one)."""
        self.flops_counted = True
        model, loss = getattr(pl_module, "model", None), getattr(pl_module, "loss", None)
        if not isinstance(model, torch.nn.Module) or loss is None or not isinstance(batch, dict):
            log.info("perf: no perf/mfu: the LightningModule has no `model` and `loss` to count FLOPs on")
            return
        try:
            self.flops = batch_flops(model, loss, batch, trainer.precision_plugin.forward_context())
        except Exception as err:  # measuring must not end a run: said, and the figure left out
            log.warning(
                "perf: no perf/mfu: the model's FLOPs could not be counted (%s: %s)", type(err).__name__, err
            )

    def _read(self, trainer, window: Window, values: dict) -> None:
        """A logging step's figures, once the readout's copy has passed every mark of its window."""
        seconds = self.timeline.window() if self.timeline is not None else {}
        total = sum(seconds.values())
        if window.steps <= 0 or total <= 0:
            return
        world = trainer.world_size  # every rank's examples and positions: the same shapes on each
        figures = {
            "perf/tokens_per_s": window.positions * world / total,
            "perf/loss_tokens_per_s": values["loss_tokens"] / total,
            "perf/examples_per_s": window.examples * world / total,
            "perf/step_s": total / window.steps,
            # `finish` follows the last step (time_share's alone); `setup` only the first window holds
            **{
                f"perf/time/{phase}": spent / window.steps
                for phase, spent in seconds.items()
                if phase != "finish" and (phase != "setup" or spent > 0)
            },
        }
        if self.flops and self.peak:  # this device's share of the step over its peak
            rate = self.flops * window.batches / total
            if rate > self.peak:
                self._above_peak(window.step, rate)
            if rate <= self.peak:
                figures["perf/mfu"] = rate / self.peak
        self.readout.add(window.step, figures)
        self.rows.append((window, figures, seconds))
        if self.fetches is not None and not self.fetches.seen and not self.unseen_fetches:
            self.unseen_fetches = True
            log.warning(
                "perf: Lightning %s told its profiler of no batch fetch: data_wait not measured",
                pl.__version__,
            )
        if window.first >= self.start + self.warmup:
            self._judge_data_wait(trainer, window, seconds["data_wait"], total)

    def _above_peak(self, step: int, rate: float) -> None:
        """The steps ran faster than the peak: a CPU's measured peak is measured again, once a run, and raised (and
        cached); steps faster than that too, or than any other peak, are a measurement fault, said once, and no
        MFU is given."""
        if self.peak_source.startswith("measured") and "measured again" not in self.peak_source:
            source, cached = self.peak_source, self.peak
            self.peak = raise_peak(self.dtype, self.peak_cache, cached)
            self.peak_source = f"{source}; measured again at step {step}, above the cached {cached:.4g}"
            log.warning(
                "perf: step %d ran at %.4g FLOP/s, above the CPU's cached peak %.4g (%s): it was measured low, on "
                "a busy machine; measured again, %.4g written to %s",
                *(step, rate, cached, source, self.peak, self.peak_cache),
            )
            if rate <= self.peak:
                return
        if self.mfu_fault is None:
            self.mfu_fault = (
                f"step {step} ran at {rate:.4g} FLOP/s, above the peak {self.peak:.4g} ({self.peak_source}): the "
                f"peak or the FLOP count is wrong; set perf.peak_flops to the device's dense {self.dtype} peak"
            )
            log.warning("perf: no perf/mfu, a measurement fault: %s", self.mfu_fault)

    def _judge_data_wait(self, trainer, window: Window, wait: float, total: float) -> None:
        """The data_wait symptom: the loader's share of the latest `window` steps at perf.data_wait or above."""
        self.waits.append((window.steps, wait, total))
        while len(self.waits) > 1 and sum(s for s, _, _ in list(self.waits)[1:]) >= self.window:
            self.waits.popleft()
        steps = sum(s for s, _, _ in self.waits)
        waited, spent = sum(w for _, w, _ in self.waits), sum(t for _, _, t in self.waits)
        share = waited / spent
        if steps < self.window or share < self.data_wait or self.reported or not trainer.is_global_zero:
            return
        self.reported = True
        detail = (
            f"each step waited on its training loader {share:.0%} of its time over the last {steps} steps "
            f"({1e3 * waited / steps:.1f} ms of {1e3 * spent / steps:.1f} ms; perf.data_wait={self.data_wait})"
        )
        self.readout.report(
            Symptom("data_wait", window.step, "train_dataloader", share, detail), now=window.step
        )

    def verdict_items(self) -> dict:
        """{"perf": the medians of the logging steps' figures past the warm-up (mfu: null and `mfu_fault` where the
        steps ran faster than a peak that cannot be raised), each phase's share of the training loop's whole time
        (time_share), the loop's start and end, and what they are read against}."""
        past = [row for row in self.rows if row[0].first >= self.start + self.warmup]
        used = past or self.rows
        perf: dict = {name: _median([f.get(f"perf/{name}") for _, f, _ in used]) for name in FIGURES}
        if self.flops and self.peak:  # against the final peak: one raised during the run reads every step
            perf["mfu"] = _median([self.flops * w.batches / sum(s.values()) / self.peak for w, _, s in used])
        perf["mfu"] = None if self.mfu_fault else perf["mfu"]
        started, ended, spent = self.loop or (0.0, 0.0, {})
        spent = spent or {phase: sum(s[phase] for _, _, s in self.rows) for phase in PHASES}
        whole = sum(spent.values())
        perf["time_share"] = {p: float(f"{spent[p] / whole:.4g}") if whole else None for p in PHASES}
        perf.update(
            log_steps=len(used),
            warmup_steps=self.warmup if past else 0,
            flops_per_step=self.flops * self.accumulate if self.flops else None,
            peak_flops=float(f"{self.peak:.4g}") if self.peak else None,
            peak=self.peak_source or None,
            dtype=self.dtype or None,
            **({"mfu_fault": self.mfu_fault} if self.mfu_fault else {}),
            **({"loop": {"started": started, "ended": ended}} if ended else {}),
        )
        return {"perf": perf}


def _counted(masks: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The positions in the loss of `masks`, counted on the device, for the logging step's one copy."""
    if not masks:
        return torch.zeros((), device=device)
    return torch.cat([mask.reshape(-1) for mask in masks]).sum()


def _median(values: list) -> float | None:
    known = [v for v in values if isinstance(v, (int, float))]
    return float(f"{statistics.median(known):.4g}") if known else None


def speed_of(trainer) -> list[Speed]:
    """The run's Speed among `trainer`'s callbacks, as a list ([] where it has none)."""
    return [c for c in getattr(trainer, "callbacks", None) or [] if isinstance(c, Speed)]
