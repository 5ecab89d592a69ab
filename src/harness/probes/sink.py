"""The metric sink, `MetricSink`: a step's probe scalars handed to every logger as one row, the symptoms the
probes report kept once per name and place, and every row read by its listeners (the symptom detectors). Device
values reach it through the run's readout (harness.train.perf.readout): one copy to the host a logging step."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger

from harness.probes.trackers import has_tracker, log_scalars, log_table
from harness.report.symptoms import Symptom, nonfinite
from harness.train.nonfinite import NonFinite
from harness.train.perf.readout import noted, read_all, readout_of

log = logging.getLogger(__name__)


class MetricSink(pl.Callback):
    """A step's probe scalars to the loggers as one row, flushed at each batch's end; the symptoms kept."""

    def __init__(self):
        self.pending: dict[int, dict[str, float]] = {}
        self.listeners: list = []
        self.symptoms: list[Symptom] = []  # in the order they were first seen
        self.seen: set[tuple[str, str]] = set()
        self.readout = None  # the run's Readout; without one (a bare Trainer), the sink reads its own queue
        self.queued: list[tuple[dict, Callable]] = []

    def on_train_start(self, trainer, pl_module) -> None:
        readout = readout_of(trainer)
        if readout is not None and readout is not self.readout:
            readout.after(self.flush)  # the rows the readers added, written after the readout's one copy
        self.readout = readout

    def defer(self, step: int, tensors: dict, read: Callable) -> None:
        """Queue device `tensors` for `read(values)` (host floats, nested lists for tensors of 1 or more
        dimensions), copied with the step's other values at the end of the batch."""
        if self.readout is not None:
            self.readout.defer(step, tensors, read)
        else:
            self.queued.append((tensors, read))

    def add(self, step: int, metrics: dict[str, float]) -> None:
        """Queue `metrics` (plain floats, on the host) for `step`."""
        self.pending.setdefault(step, {}).update(metrics)

    def listen(self, callback) -> None:
        """Call `callback(step, row)` with every row at the flush that logs it, before the loggers get it."""
        self.listeners.append(callback)

    def report(self, symptom: Symptom, now: int | None = None) -> bool:
        """Record `symptom` once per name and `where`: a warning and `symptoms/<name>` at step `now`; whether
        new."""
        # the run's symptoms kept in one place where there is a readout: it warns and logs them
        return noted(self, symptom, now, forward=self.readout.report if self.readout is not None else None)

    def flush(self, trainer: pl.Trainer) -> None:
        """Hand what is queued to the listeners, then to the loggers on global rank 0."""
        queued, self.queued = self.queued, []
        read_all(queued)
        if self.pending and self.listeners:
            for step in sorted(self.pending):
                for listener in self.listeners:
                    listener(step, self.pending[step])
        if self.pending and trainer.is_global_zero:
            for step in sorted(self.pending):
                for logger in trainer.loggers:
                    if isinstance(logger, TensorBoardLogger):
                        log_scalars(logger.experiment, self.pending[step], step)
                    else:
                        logger.log_metrics(self.pending[step], step=step)
        self.pending = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.readout is None:  # else the readout's flush calls this sink's
            self.flush(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self.flush(trainer)
        self.table(trainer)

    def on_exception(self, trainer, pl_module, exception) -> None:
        """A non-finite stop is a symptom too; what is queued still reaches the loggers."""
        if isinstance(exception, NonFinite):
            self.report(nonfinite(exception))
        self.queued = []  # a failed step's tensors may be what failed
        self.flush(trainer)
        self.table(trainer)

    def table(self, trainer: pl.Trainer) -> None:
        """The symptoms as one table, for the trackers that show tables (TensorBoard, wandb)."""
        if self.symptoms and trainer.is_global_zero and has_tracker(trainer):
            columns = ["name", "step", "where", "value", "detail", "suggestion"]
            rows = [[s.as_dict()[c] for c in columns] for s in self.symptoms]
            log_table(trainer, "symptoms", columns, rows, trainer.global_step)

    def verdict_items(self) -> dict:
        return {} if self.readout is not None else {"symptoms": [s.as_dict() for s in self.symptoms]}
