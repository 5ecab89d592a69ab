"""Where probe output goes: scalars through every active logger (one row a step), histograms, figures and
tables to the trackers that can show them (TensorBoard, wandb). Nothing here imports wandb or matplotlib
unless that logger is active or a figure is made."""

from __future__ import annotations

import contextlib
import logging

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

from harness.compat import tensorboard_file_writer
from harness.faults import NonFinite
from harness.symptoms import Symptom, nonfinite

log = logging.getLogger(__name__)

#: wandb's x-axis for everything the harness logs (WandbLogger defines it as the step metric)
WANDB_STEP = "trainer/global_step"


class MetricSink(pl.Callback):
    """Gathers the scalars the probes compute during a step and hands them to the loggers as one row; keeps the
    symptoms the probes report.

    One `log_metrics` call per logger per step keeps metrics.csv to one probe row a step (instead of one a
    probe) and costs a few microseconds; `LightningModule.log` would cost tens per key. The ProbeSet owns it
    and runs it after the probes: it flushes at the end of each batch and of training.

    A reader of the probes' stream (the symptom detectors) subscribes with `listen(callback)`: at each flush it
    is called as callback(step, row) with the step's whole row, before the loggers get it, and may `add` to it
    or `report` a symptom."""

    def __init__(self):
        self.pending: dict[int, dict[str, float]] = {}
        self.listeners: list = []
        self.symptoms: list[Symptom] = []  # in the order they were first seen
        self.seen: set[tuple[str, str]] = set()

    def add(self, step: int, metrics: dict[str, float]) -> None:
        """Queue `metrics` (plain floats, already on the host) for `step`."""
        self.pending.setdefault(step, {}).update(metrics)

    def listen(self, callback) -> None:
        """Call `callback(step, row)` with every row, at the flush that logs it."""
        self.listeners.append(callback)

    def report(self, symptom: Symptom, now: int | None = None) -> bool:
        """Record `symptom` unless the same name was already reported for the same `where`: a warning on the
        console and `symptoms/<name>` (how many so far) through every logger, at step `now` (default: the
        symptom's own; a step already logged may be past for a tracker). Whether it was new."""
        if (symptom.name, symptom.where) in self.seen:
            return False
        self.seen.add((symptom.name, symptom.where))
        self.symptoms.append(symptom)
        log.warning("%s", symptom.line())
        count = sum(s.name == symptom.name for s in self.symptoms)
        self.add(symptom.step if now is None else now, {f"symptoms/{symptom.name}": float(count)})
        return True

    def flush(self, trainer: pl.Trainer) -> None:
        """Log what is queued, on global rank 0 only."""
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
        self.flush(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self.flush(trainer)
        self.table(trainer)

    def on_exception(self, trainer, pl_module, exception) -> None:
        """A run stopped by a non-finite value: that is a symptom too; what is queued still reaches the loggers
        (Lightning finishes them after this hook)."""
        if isinstance(exception, NonFinite):
            self.report(nonfinite(exception))
        self.flush(trainer)
        self.table(trainer)

    def table(self, trainer: pl.Trainer) -> None:
        """The symptoms as one table, for the trackers that show tables (TensorBoard, wandb)."""
        if self.symptoms and trainer.is_global_zero and has_tracker(trainer):
            columns = ["name", "step", "where", "value", "detail", "suggestion"]
            rows = [[s.as_dict()[c] for c in columns] for s in self.symptoms]
            log_table(trainer, "symptoms", columns, rows, trainer.global_step)

    def verdict_items(self) -> dict:
        return {"symptoms": [s.as_dict() for s in self.symptoms]}


@contextlib.contextmanager
def own_randomness(device: torch.device, seed: int = 0):
    """Run a probe's forward pass on its own seeded random stream and give training its stream back
    untouched, so that probing never changes what a (re-seeded) training step draws."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def tensorboard(trainer: pl.Trainer):
    """The SummaryWriter of the active TensorBoard logger, or None."""
    return next((lg.experiment for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)


def wandb_run(trainer: pl.Trainer):
    """The run of the active wandb logger, or None."""
    return next((lg.experiment for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)


def has_tracker(trainer: pl.Trainer) -> bool:
    """Whether a logger that shows histograms and images (TensorBoard, wandb) is active."""
    return any(isinstance(lg, (TensorBoardLogger, WandbLogger)) for lg in trainer.loggers)


def log_scalars(writer, metrics: dict[str, float], step: int) -> None:
    """`metrics` to TensorBoard as one event holding every value. Lightning's logger writes an event a scalar,
    each through add_scalar's conversions and its own record (TensorBoard checksums every record in pure
    Python): ~56 µs a scalar, 5.6 ms for a step's ~100 probe scalars, more than a step of the tiny model; one
    event takes ~0.5 ms. TensorBoard reads the values as scalars all the same."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    values = [Summary.Value(tag=tag, simple_value=value) for tag, value in metrics.items()]
    tensorboard_file_writer(writer).add_summary(Summary(value=values), step)


def log_histograms(trainer: pl.Trainer, histograms: dict[str, dict], step: int) -> None:
    """`histograms`: tag -> {min, max, num, sum, sum_squares, edges (bins + 1), counts (bins)}, computed on the
    device already: TensorBoard gets them raw (no second pass over the tensor), wandb as np_histogram."""
    writer, run = tensorboard(trainer), wandb_run(trainer)
    if writer is not None:  # one event for all of them, as log_scalars does: 8.5 ms for 108, not 23
        from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary

        values = [
            Summary.Value(
                tag=tag,
                histo=HistogramProto(
                    min=h["min"],
                    max=h["max"],
                    num=h["num"],
                    sum=h["sum"],
                    sum_squares=h["sum_squares"],
                    bucket_limit=h["edges"][1:],
                    bucket=h["counts"],
                ),
            )
            for tag, h in histograms.items()
        ]
        tensorboard_file_writer(writer).add_summary(Summary(value=values), step)
    if run is not None:
        import wandb

        run.log(
            {
                **{
                    tag: wandb.Histogram(np_histogram=(h["counts"], h["edges"]))
                    for tag, h in histograms.items()
                },
                WANDB_STEP: step,
            }
        )


def log_image(trainer: pl.Trainer, tag: str, image, step: int) -> None:
    """`image`: uint8 array [height, width, rgb] (see figures.to_rgb)."""
    writer, run = tensorboard(trainer), wandb_run(trainer)
    if writer is not None:
        writer.add_image(tag, image, global_step=step, dataformats="HWC")
    if run is not None:
        import wandb

        run.log({tag: wandb.Image(image), WANDB_STEP: step})


def _markdown_cell(value) -> str:
    """Code-formatted, so spaces and the visible control characters survive markdown; '|' escaped."""
    return "" if value is None else "`" + str(value).replace("|", "\\|").replace("`", "'") + "`"


def log_table(trainer: pl.Trainer, tag: str, columns: list[str], rows: list[list], step: int) -> None:
    """A table: a wandb Table, and TensorBoard text (a markdown table)."""
    writer, run = tensorboard(trainer), wandb_run(trainer)
    if writer is not None:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_markdown_cell(v) for v in row) + " |" for row in rows]
        writer.add_text(tag, "\n".join(lines), global_step=step)
    if run is not None:
        import wandb

        run.log({tag: wandb.Table(columns=columns, data=rows), WANDB_STEP: step})
