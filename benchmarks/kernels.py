"""What the probes add to a step, counted in kernels, in kernels.json: aten operations an average training step runs
(each a kernel launch on a GPU, where a step's time grows with their number long before it grows with their size),
with every probe over none (`probes`, target <= 1.05), with the probes at wandb.watch's own period (histograms of
every parameter and gradient every 10 steps: `probes_watch_period`), and wandb.watch(log="all", log_freq=10)
itself (`wandb_watch`), each over the same steps without.

GPT-2 small's structure (12 blocks, 12 heads: the same operations a step, whatever the width), 96 wide, so that
the 1000 steps of each variant (a multiple of every default period: their average step) take under a minute. A
count, not a time: the same on every machine, and on a CPU as on a GPU."""

from __future__ import annotations

import os
from collections import Counter

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import OUT, write
from benchmarks.probes import CONF, RandomTokens
from harness.models import GPT
from harness.probes import build_probes
from harness.train.checkpoints import ResumeState
from harness.train.module import HarnessModule
from harness.train.nonfinite import NonFiniteGuard
from harness.train.perf.readout import Readout

TARGET = 1.05  # every probe / none, kernels an average step, at most
STEPS = 1000  # a multiple of every default period (1, 10, 20, 50, 100, 1000): their average step
MODEL = dict(size="gpt2", d_model=96, max_len=32)  # GPT-2 small's 12 blocks of 12 heads, each 8 wide
BATCH, VOCAB = 2, 512


class _Counting(TorchDispatchMode):
    def __init__(self, counts: Counter):
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts["ops"] += 1
        return func(*args, **(kwargs or {}))


class _CountKernels(pl.Callback):
    """Counts every aten operation from the first batch's start to the end of training (the training thread's)."""

    def __init__(self, counts: Counter):
        self.counts, self.mode = counts, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.mode is None:
            self.mode = _Counting(self.counts)
            self.mode.__enter__()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.counts["steps"] = trainer.global_step

    def on_train_end(self, trainer, pl_module) -> None:
        self.mode.__exit__(None, None, None)


def kernels_a_step(variant: str) -> float:
    """Aten operations an average step of `variant` runs: off, probes, probes_watch_period, wandb_watch."""
    torch.manual_seed(0)
    module = HarnessModule(GPT(vocab_size=VOCAB, **MODEL))
    runs = OUT / "kernels_runs" / variant
    runs.mkdir(parents=True, exist_ok=True)
    data = RandomTokens(MODEL["max_len"], BATCH, VOCAB)
    probes, loggers = [], [pl.loggers.CSVLogger(runs, name="", version="")]
    if variant.startswith("probes"):
        conf = OmegaConf.load(CONF)
        if variant == "probes_watch_period":
            conf.histograms.every = 10
        # mode=full's probes: the overfit-only ones do nothing there; no plots, nothing drawn at the end
        conf.plots = False
        probes = build_probes(conf, run_dir=runs, data=data, overfit=False)
    if variant == "wandb_watch":
        from pytorch_lightning.loggers import WandbLogger

        loggers.append(WandbLogger(save_dir=str(runs), project="harness-bench", offline=True))
    counts = Counter()
    trainer = pl.Trainer(
        max_steps=STEPS,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        log_every_n_steps=10,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=loggers,
        callbacks=[_CountKernels(counts), NonFiniteGuard(), ResumeState(), *probes, Readout()],
        default_root_dir=runs,
        accelerator="cpu",
    )
    if variant == "wandb_watch":
        loggers[-1].watch(module.model, log="all", log_freq=10)  # its run started: wandb.watch needs one
    try:
        trainer.fit(module, datamodule=data)
    finally:
        if variant == "wandb_watch":
            import wandb

            wandb.finish()
    return counts["ops"] / counts["steps"]


def main() -> dict:
    os.environ["WANDB_MODE"] = "offline"  # before wandb is imported: no network
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_DIR", str(OUT / "kernels_runs"))
    counts = {v: kernels_a_step(v) for v in ("off", "probes", "probes_watch_period", "wandb_watch")}
    ratios = {v: round(counts[v] / counts["off"], 4) for v in counts if v != "off"}
    write("kernels", ratios, {"target": {"probes": f"<= {TARGET}"}, "kernels_a_step": counts, "model": MODEL})
    return {
        "probes_kernels": (ratios["probes"], ratios["probes"] <= TARGET),
        "probes_watch_period_kernels": (ratios["probes_watch_period"], None),
        "wandb_watch_kernels": (ratios["wandb_watch"], None),
    }
