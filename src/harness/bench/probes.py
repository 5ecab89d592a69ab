"""What the probes cost: the step time of a real Lightning training step with every probe on (their default
frequencies) over the same step with none, and the same for `wandb.watch(model, log="all", log_freq=10)`.

How: one Trainer per variant (no probes, probes, wandb.watch), each fitting in a thread of its own and parked
at the start of every batch by a `Gate` callback. `gate.step()` lets exactly one batch through and returns when
the loop is back at the next batch start, so a call is one whole loop iteration: data fetch, every callback
hook, forward, backward, optimizer step, logging. Only one thread runs at a time, so `ratio()` can interleave
the variants in one process as it does for any two functions. A block of `inner` steps is a multiple of every
probe's period, so each block carries its share of the every-K probes (histograms, datapoints, embeddings,
gradient by position).

Setup: language modelling on random tokens (every position in the loss: the most logit work), CSV logger
(the default; TensorBoard and wandb add their own writing on top), mode=full's log_every_n_steps=10 for
Lightning's own metrics, no validation. `probes` is the overfit-mode set (all probes, per-example logit mass
and the re-seeding hashes included): mode=full runs a subset of it. The details file adds the milliseconds a
step spends inside the probes' own hooks, a figure the machine's noise moves less than the ratio."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader

from harness.bench import OUT, ratio, write
from harness.data.dataset import CharDataset
from harness.data.tokenizer import CharTokenizer
from harness.models import Transformer
from harness.module import HarnessModule
from harness.probes import build_probes
from harness.probes.watch import WandbWatch

CONF = Path(__file__).resolve().parents[3] / "conf" / "probes" / "default.yaml"
MODELS = {  # the two reference models: (model kwargs, batch size)
    "tiny": (dict(d_model=32, layers=2, heads=4, max_len=32), 4),
    "small": (dict(d_model=128, layers=4, heads=4, max_len=128), 16),
}
VOCAB = 256
TARGETS = {"tiny": 1.10, "small": 1.02}  # probes on / off, at most
INNER = 100  # steps per timed block: a multiple of every default period (1, 10, 50, 100)
WATCH_INNER = 20  # steps per timed block of wandb.watch (log_freq 10)
HOOKS = ("on_train_batch_start", "on_before_optimizer_step", "on_train_batch_end")  # the per-step ones


class RandomTokens(pl.LightningDataModule):
    """Next-token prediction on random tokens over `VOCAB` characters, held in memory."""

    def __init__(self, length: int, batch_size: int, size: int = 2048, seed: int = 0):
        super().__init__()
        rng = random.Random(seed)
        self.tokenizer = CharTokenizer("".join(chr(0x100 + i) for i in range(VOCAB)))  # printable, distinct
        records = [
            {"text": "".join(rng.choice(self.tokenizer.alphabet) for _ in range(length + 1))}
            for _ in range(size)
        ]
        self.train_dataset = CharDataset(records, self.tokenizer, "lm", length)
        self.val_dataset = CharDataset(records[:64], self.tokenizer, "lm", length)
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_dataset, batch_size=self.batch_size, shuffle=True, drop_last=True)


class Gate(pl.Callback):
    """Parks the fit loop at every batch start; `step()` lets one batch through and waits for the next start."""

    def __init__(self):
        self.go, self.arrived = threading.Semaphore(0), threading.Semaphore(0)
        self.open = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self.open:
            self.arrived.release()
            self.go.acquire()

    def step(self) -> None:
        self.go.release()
        self.arrived.acquire()


def timed_hooks(callbacks: list, clock: list[float]) -> list:
    """`callbacks`, each per-step hook wrapped to add the seconds spent in it to clock[0]: the probes' own
    share of a step, a second figure beside the ratio that the machine's noise moves less."""
    for callback in callbacks:
        for hook in HOOKS:
            inner = getattr(callback, hook)

            def timed(*args, inner=inner, **kwargs):
                started = time.perf_counter()
                try:
                    return inner(*args, **kwargs)
                finally:
                    clock[0] += time.perf_counter() - started

            setattr(callback, hook, timed)
    return callbacks


class Variant:
    """A Trainer fitting in its own thread, stepped one batch at a time through its Gate."""

    def __init__(self, name: str, model_name: str, callbacks: list, loggers: list, data: RandomTokens):
        kwargs, _ = MODELS[model_name]  # `data`: its own copy (a Trainer attaches itself to its datamodule)
        torch.manual_seed(0)
        self.module = HarnessModule(Transformer(vocab_size=VOCAB, **kwargs))
        self.gate = Gate()
        self.trainer = pl.Trainer(
            max_steps=-1,
            max_epochs=-1,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            log_every_n_steps=10,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator=os.environ.get("BENCH_ACCELERATOR", "cpu"),  # gpu: scripts/gpu_check.sh
            devices=1,
            logger=loggers,
            callbacks=[*callbacks, self.gate],
            default_root_dir=OUT / "probes_runs" / model_name / name,
        )
        self.thread = threading.Thread(
            target=self.trainer.fit, args=(self.module,), kwargs={"datamodule": data}, daemon=True, name=name
        )
        self.thread.start()
        self.gate.arrived.acquire()  # parked at the first batch
        self.steps, self.seconds, self.hook_clock = 0, 0.0, [0.0]

    def step(self) -> None:
        started = time.perf_counter()
        self.gate.step()
        self.seconds += time.perf_counter() - started
        self.steps += 1

    def close(self) -> None:
        self.trainer.should_stop = True
        self.gate.open = True
        self.gate.go.release()
        self.thread.join()


def variants(model_name: str) -> dict[str, Variant]:
    cfg = OmegaConf.load(CONF)
    runs = OUT / "probes_runs" / model_name
    kwargs, batch_size = MODELS[model_name]

    def data() -> RandomTokens:
        return RandomTokens(kwargs["max_len"], batch_size)

    def csv(name: str) -> list:
        return [CSVLogger(save_dir=runs / name, name="", version="")]

    out = {"off": Variant("off", model_name, [], csv("off"), data())}
    (runs / "probes").mkdir(parents=True, exist_ok=True)
    own, clock = data(), [0.0]
    probes = timed_hooks(build_probes(cfg, run_dir=runs / "probes", data=own, overfit=True), clock)
    out["probes"] = Variant("probes", model_name, probes, csv("probes"), own)
    out["probes"].hook_clock = clock
    from pytorch_lightning.loggers import WandbLogger

    (runs / "wandb").mkdir(parents=True, exist_ok=True)
    wandb_logger = WandbLogger(save_dir=str(runs / "wandb"), project="harness-bench", offline=True)
    out["wandb_watch"] = Variant(
        "wandb_watch", model_name, [WandbWatch("all", 10)], [*csv("wandb_watch"), wandb_logger], data()
    )
    return out


def measure(model_name: str, reps: int) -> dict:
    """{variant: ratio() result against no probes} for one reference model, and the mean milliseconds a step
    takes in each variant and spends inside the probes' per-step hooks."""
    runs = variants(model_name)
    try:
        for variant in runs.values():  # past the one-off costs: first steps, step-0 probes, lazy imports
            for _ in range(INNER // 5 + 1):
                variant.step()
        for variant in runs.values():
            variant.steps, variant.seconds, variant.hook_clock[0] = 0, 0.0, 0.0
        off = runs["off"].step
        results = {
            "probes": ratio(runs["probes"].step, off, reps=reps, inner=INNER, warmup=0),
            # blocks of 2 of its logging periods: enough for a per-step cost, and a fifth of the time
            "wandb_watch": ratio(runs["wandb_watch"].step, off, reps=reps, inner=WATCH_INNER, warmup=0),
        }
        results["ms_per_step"] = {name: round(1e3 * v.seconds / v.steps, 3) for name, v in runs.items()}
        results["probe_hooks_ms_per_step"] = round(
            1e3 * runs["probes"].hook_clock[0] / runs["probes"].steps, 3
        )
        return results
    finally:
        for variant in runs.values():
            variant.close()
        import wandb

        wandb.finish()


def main(reps: int = 5, models: tuple[str, ...] = tuple(MODELS), threads: int | None = 1) -> dict:
    """Measure, write outputs/bench/probes.json (+ .details.json), return {figure: (value, target met)}.

    One torch thread by default: on a shared machine a second thread waits on whatever else runs there, and
    that noise (±10% and more on a 2-core machine) is larger than the 2% the small model's target allows.
    threads=None keeps torch's default."""
    if threads is not None:
        torch.set_num_threads(threads)
    os.environ["WANDB_MODE"] = "offline"  # before wandb is imported: no network
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_DIR", str(OUT / "probes_runs"))
    figures, details = {}, {}
    for model_name in models:
        results = measure(model_name, reps)
        figures[model_name] = {
            "probes": round(results["probes"]["median"], 3),
            "wandb_watch": round(results["wandb_watch"]["median"], 3),
        }
        details[model_name] = {
            "model": MODELS[model_name][0],
            "batch_size": MODELS[model_name][1],
            "vocab": VOCAB,
            "probe_hooks_share_of_a_step": round(
                results["probe_hooks_ms_per_step"] / results["ms_per_step"]["off"], 4
            ),
            **results,
        }
    write(
        "probes",
        figures,
        {
            "target": {f"{m}/probes": f"<= {t}" for m, t in TARGETS.items()},
            "steps_per_block": INNER,
            "threads": torch.get_num_threads(),
            "ratios_over_no_probes": details,
        },
    )
    out = {}
    for model_name, values in figures.items():
        out[f"{model_name}/probes"] = (values["probes"], values["probes"] <= TARGETS[model_name])
        # no target of its own: it is the one-liner the probes replace, so the probes should cost less
        out[f"{model_name}/wandb_watch"] = (values["wandb_watch"], values["wandb_watch"] > values["probes"])
    return out
