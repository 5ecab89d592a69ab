"""Where probe output goes besides the sink's rows: histograms, images and tables to the trackers that show
them (TensorBoard, wandb), scalars as one TensorBoard event, and `own_randomness` for a probe's forward."""

from __future__ import annotations

import contextlib

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

from harness.compat import tensorboard_file_writer

#: wandb's x-axis for everything the harness logs (WandbLogger defines it as the step metric)
WANDB_STEP = "trainer/global_step"


@contextlib.contextmanager
def own_randomness(device: torch.device, seed: int = 0):
    """Run a probe's forward on its own seeded random stream, leaving training's stream untouched."""
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
    """`metrics` to TensorBoard as one event holding every value (one event a scalar costs ~10x more)."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    values = [Summary.Value(tag=tag, simple_value=value) for tag, value in metrics.items()]
    tensorboard_file_writer(writer).add_summary(Summary(value=values), step)


def log_histograms(trainer: pl.Trainer, histograms: dict[str, dict], step: int) -> None:
    """`histograms` (tag -> min, max, num, sums, edges, counts) to TensorBoard in one event, and to wandb."""
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
    """`image` (uint8 [height, width, rgb], figures.to_rgb) to TensorBoard and wandb."""
    writer, run = tensorboard(trainer), wandb_run(trainer)
    if writer is not None:
        writer.add_image(tag, image, global_step=step, dataformats="HWC")
    if run is not None:
        import wandb

        run.log({tag: wandb.Image(image), WANDB_STEP: step})


def _markdown_cell(value) -> str:
    """Code-formatted, so spaces and control pictures survive markdown; '|' escaped."""
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
