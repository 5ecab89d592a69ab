"""What measuring the speed costs, in perf.json: `perf`, the step time of a real Lightning training step with the
Speed callback (harness.train.perf: its marks, the harness's hooks and the loader's fetches timed, the figures
deferred to the readout) over the same step without it, target <= 1.01; `perf_hooks`, 1 + its own hooks' share.

The probes' cost in kernels, in kernels.json: the aten operations an average training step runs (each a kernel
launch on a GPU, where a step's time grows with their number long before their size), with every probe over none
(`probes`, target <= 1.05), with the probes at wandb.watch's own period (histograms of every parameter and
gradient every 10 steps: `probes_watch_period`), and wandb.watch(log="all", log_freq=10) itself (`wandb_watch`),
each over the same steps without.

GPT-2 small's structure (12 blocks, 12 heads: the same operations a step, whatever the width), 96 wide, so that
the 1000 steps of each variant (a multiple of every default period: their average step) take under a minute. A
count, not a time: the same on every machine, and on a CPU as on a GPU."""

# How: benchmarks.probes' Bench, one Trainer switching the Speed in and out every CHUNK steps (the tiny model: the
# largest share a fixed cost per step can take), the readout and the harness's own callbacks in both, mode=full's
# log_every_n_steps=10. Switched out, the Speed also lets go of the hooks it times (teardown); switched in, it
# takes them again (on_fit_start): the off side times nothing.

from __future__ import annotations

import os
from collections import Counter

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import OUT, write
from benchmarks.probes import BARE_TRAINER, INNER, Bench, RandomTokens, compare_hooks, timed_hooks
from harness.config.groups.probes import Probes
from harness.models import GPT
from harness.probes import build_probes
from harness.train.checkpoints import ResumeState
from harness.train.loggers import MetricsCSV
from harness.train.module import HarnessModule
from harness.train.nonfinite import NonFiniteGuard
from harness.train.perf.readout import Readout
from harness.train.perf.speed import Speed

TARGET = 1.01
MODEL = "tiny"


def _switches(speed: Speed, readout: Readout) -> dict:
    def on(bench: Bench) -> None:
        speed.teardown(bench.trainer, bench.module, "fit")  # the first time, what it took as the fit started
        bench.use([speed, readout])
        speed.on_fit_start(bench.trainer, bench.module)
        speed.on_train_start(bench.trainer, bench.module)

    def off(bench: Bench) -> None:
        speed.teardown(bench.trainer, bench.module, "fit")
        bench.use([readout])

    return {"perf": on, "off": off}


def speed_main(reps: int = 7, inner: int = INNER) -> dict:
    clock = [0.0]
    speed, readout = Speed(peak_cache=str(OUT / "perf_peaks.json")), Readout()
    runs = OUT / "perf_runs"
    runs.mkdir(parents=True, exist_ok=True)
    logger = MetricsCSV(runs, name="", version="")
    bench = Bench("perf", MODEL, [*timed_hooks([speed], clock), readout], [logger], _switches(speed, readout))
    try:
        bench.run("perf", 20)  # past the one-off costs: the FLOP count, the CPU's peak, first steps
        bench.run("off", 20)
        result = compare_hooks(bench, "perf", clock, reps, inner)
    finally:
        bench.close()
    ratio, hooks = round(result["median"], 4), round(1 + result["hooks_share"], 4)
    write("perf", {MODEL: {"perf": ratio, "perf_hooks": hooks}}, {"target": f"<= {TARGET}", MODEL: result})
    spread = (round(result["min"], 4), round(result["max"], 4), result["reps"])
    return {
        "perf": (ratio, ratio <= TARGET and hooks <= TARGET, spread),
        "perf_hooks": (hooks, hooks <= TARGET),
    }


KERNELS_TARGET = 1.05  # every probe / none, kernels an average step, at most
STEPS = 1000  # a multiple of every default period (1, 10, 20, 50, 100, 1000): their average step
KERNELS_MODEL = dict(size="gpt2", d_model=96, max_len=32)  # GPT-2 small's 12 blocks of 12 heads, each 8 wide
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
    module = HarnessModule(GPT(vocab_size=VOCAB, **KERNELS_MODEL))
    runs = OUT / "kernels_runs" / variant
    runs.mkdir(parents=True, exist_ok=True)
    data = RandomTokens(KERNELS_MODEL["max_len"], BATCH, VOCAB)
    probes, loggers = [], [pl.loggers.CSVLogger(runs, name="", version="")]
    if variant.startswith("probes"):
        conf = OmegaConf.structured(Probes)  # probes=default: its yaml keeps no value of its own
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
        **BARE_TRAINER,
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


def kernels_main() -> dict:
    os.environ["WANDB_MODE"] = "offline"  # before wandb is imported: no network
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_DIR", str(OUT / "kernels_runs"))
    counts = {v: kernels_a_step(v) for v in ("off", "probes", "probes_watch_period", "wandb_watch")}
    ratios = {v: round(counts[v] / counts["off"], 4) for v in counts if v != "off"}
    write(
        "kernels",
        ratios,
        {"target": {"probes": f"<= {KERNELS_TARGET}"}, "kernels_a_step": counts, "model": KERNELS_MODEL},
    )
    return {
        "probes_kernels": (ratios["probes"], ratios["probes"] <= KERNELS_TARGET),
        "probes_watch_period_kernels": (ratios["probes_watch_period"], None),
        "wandb_watch_kernels": (ratios["wandb_watch"], None),
    }


def main(reps: int = 7, inner: int = INNER, kernels: bool = True) -> dict:
    """What measuring the speed costs a step (perf.json) and, with `kernels`, what the probes add in kernels
    (kernels.json)."""
    return {**speed_main(reps, inner), **(kernels_main() if kernels else {})}
