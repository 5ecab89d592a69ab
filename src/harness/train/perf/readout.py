"""The step's one copy to the host, `Readout`: what the module, the guard and the probes want to read of a step is
queued on the device (`defer`) and copied in one transfer at the end of a logging step (`flush`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from itertools import islice

import pytorch_lightning as pl
import torch

from harness.report.symptoms import Symptom

log = logging.getLogger(__name__)


def _nested(flat: list[float], shape: tuple[int, ...]):
    """`flat` as nested lists of `shape` (a float for ())."""
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    size = math.prod(shape[1:])
    return [_nested(flat[i * size : (i + 1) * size], shape[1:]) for i in range(shape[0])]


def read_all(queued: list[tuple[dict, Callable[[dict], None]]]) -> None:
    """Copy every tensor of `queued` to the host in one transfer (one a device), then call each reader with its
    values."""
    tensors = [t for values, _ in queued for t in values.values()]
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for tensor in tensors:
        by_device.setdefault(tensor.device, []).append(tensor)
    # float64 holds every float, and every integer below 2^53 (token ids, counts, steps), exactly
    flat = {
        device: iter(torch.cat([t.detach().reshape(-1).to(torch.float64) for t in group]).tolist())
        for device, group in by_device.items()
    }
    for values, read in queued:
        host = {}
        for key, tensor in values.items():
            host[key] = _nested(list(islice(flat[tensor.device], tensor.numel())), tuple(tensor.shape))
        read(host)


def noted(holder, symptom: Symptom, now: int | None, forward: Callable | None = None) -> bool:
    """`symptom` kept by `holder` (its `seen`, `symptoms` and `add`) once per name and `where`, then handed to
    `forward`, or warned of and logged as `symptoms/<name>` at step `now`; whether new."""
    if (symptom.name, symptom.where) in holder.seen:
        return False
    holder.seen.add((symptom.name, symptom.where))
    holder.symptoms.append(symptom)
    if forward is not None:
        return forward(symptom, now)
    log.warning("%s", symptom.line())
    count = sum(s.name == symptom.name for s in holder.symptoms)
    holder.add(symptom.step if now is None else now, {f"symptoms/{symptom.name}": float(count)})
    return True


class Readout(pl.Callback):
    """Queues device values to read (`defer`) and host values to log (`add`) for a step; at the flush, one copy
    to the host, the readers called, the rows written to every logger on global rank 0, then `after` hooks.

    The harness's LightningModule flushes it at the end of its on_train_batch_end, the last hook of a batch, so
    that what every callback queued at that batch's end is read in the same copy; with another module, the
    Readout flushes in its own on_train_batch_end (add it as the last callback)."""

    def __init__(self):
        self.queued: list[tuple[dict, Callable[[dict], None]]] = []
        self.rows: dict[int, dict[str, float]] = {}
        self.hooks: list[Callable[[pl.Trainer], None]] = []
        self.symptoms: list[Symptom] = []  # in the order first seen
        self.seen: set[tuple[str, str]] = set()

    def defer(
        self, step: int, tensors: dict[str, torch.Tensor], read: Callable[[dict], None] | None = None
    ) -> None:
        """Queue `tensors` (on any device) to be copied at the next flush; `read(values)` then gets them as host
        floats (nested lists for tensors of 1 or more dimensions); without `read` they are logged at `step`."""
        if tensors:
            self.queued.append((dict(tensors), read or (lambda values: self.add(step, values))))

    # not `log`: Lightning sets every callback's `log` to its LightningModule's
    def add(self, step: int, metrics: dict[str, float]) -> None:
        """Queue host floats to be written as metrics of `step` at the next flush."""
        self.rows.setdefault(step, {}).update(metrics)

    def after(self, hook: Callable[[pl.Trainer], None]) -> None:
        """Call `hook(trainer)` after each flush (the probes' sink writes its rows then)."""
        self.hooks.append(hook)

    def report(self, symptom: Symptom, now: int | None = None) -> bool:
        """Record `symptom` once per name and `where`: a warning, `symptoms/<name>` at step `now`, the verdict's
        symptoms; whether new."""
        return noted(self, symptom, now)

    def flush(self, trainer: pl.Trainer) -> None:
        """One copy of everything queued, the readers called, the rows written, the `after` hooks called."""
        queued, self.queued = self.queued, []
        read_all(queued)
        rows, self.rows = self.rows, {}
        if rows and trainer.is_global_zero:
            for step in sorted(rows):
                for logger in trainer.loggers:
                    logger.log_metrics(rows[step], step=step)
        for hook in self.hooks:
            hook(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not getattr(pl_module, "flushes_readout", False):
            self.flush(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self.flush(trainer)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.queued = []  # a failed step's tensors may be what failed: the rows of host values still land
        self.flush(trainer)

    def verdict_items(self) -> dict:
        return {"symptoms": [s.as_dict() for s in self.symptoms]}


def readout_of(trainer: pl.Trainer | None) -> Readout | None:
    """The run's Readout among `trainer`'s callbacks, if it has one."""
    callbacks = getattr(trainer, "callbacks", None) or []
    return next((c for c in callbacks if isinstance(c, Readout)), None)
