"""The harness's training step against a hand-written PyTorch loop, and its MFU. loop.json: {"tiny": r, "small": r},
full-mode step time through the harness (real Trainer, default callbacks, probes off) over a raw loop's on the same
model, batch and optimizer. mfu.json: {"small": f}, 6 * parameters * tokens/s over the measured fp32 matmul rate."""

from __future__ import annotations

import statistics
import time

import pytorch_lightning as pl
import torch

from benchmarks import write
from harness.models import Transformer
from harness.ops import MaskedCrossEntropy
from harness.train.checkpoints import ResumeState
from harness.train.module import HarnessModule
from harness.train.nonfinite import NonFiniteGuard

MODELS = {  # the reference models (d_model, layers, heads, seq, batch), vocab 256
    "tiny": dict(d_model=32, layers=2, heads=4, seq=32, batch=4),
    "small": dict(d_model=128, layers=4, heads=4, seq=128, batch=16),
}
TARGETS = {"tiny": 1.20, "small": 1.02}
MFU_TARGET = 0.50


def reference(name: str, seed: int = 0) -> tuple[torch.nn.Module, dict]:
    spec = MODELS[name]
    torch.manual_seed(seed)
    model = Transformer(
        256, max_len=spec["seq"], d_model=spec["d_model"], layers=spec["layers"], heads=spec["heads"]
    )
    ids = torch.randint(0, 256, (spec["batch"], spec["seq"] + 1))
    batch = {
        "input_ids": ids[:, :-1],
        "targets": ids[:, 1:],
        "loss_mask": torch.ones(spec["batch"], spec["seq"], dtype=torch.bool),
    }
    return model, batch


class StepClock(pl.Callback):
    """Seconds per step over the steps after `warmup`, measured inside Lightning's own loop."""

    def __init__(self, warmup: int):
        self.warmup, self.started = warmup, None
        self.seconds = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.warmup:
            self.started = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        self.seconds = (time.perf_counter() - self.started) / (trainer.global_step - self.warmup)


def harness_step(name: str, steps: int, warmup: int = 5) -> float:
    model, batch = reference(name)
    clock = StepClock(warmup)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=warmup + steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        gradient_clip_val=1.0,
        callbacks=[NonFiniteGuard(), ResumeState(), clock],
    )
    repeated = torch.utils.data.DataLoader(_Repeat(batch, warmup + steps), batch_size=None)
    trainer.fit(HarnessModule(model), train_dataloaders=repeated)
    return clock.seconds


class _Repeat(torch.utils.data.IterableDataset):
    def __init__(self, batch: dict, times: int):
        self.batch, self.times = batch, times

    def __iter__(self):
        for _ in range(self.times):
            yield self.batch


def raw_step(name: str, steps: int, warmup: int = 5) -> float:
    model, batch = reference(name)
    loss_fn = MaskedCrossEntropy()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99))
    for i in range(warmup + steps):
        if i == warmup:
            started = time.perf_counter()
        loss = loss_fn(model(batch["input_ids"]), batch["targets"], batch["loss_mask"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return (time.perf_counter() - started) / steps


def matmul_ceiling(size: int = 1024, reps: int = 20) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    started = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * size**3 * reps / (time.perf_counter() - started)


def main(reps: int = 5) -> dict:
    figures, details, results = {}, {}, {}
    for name in MODELS:
        steps = 60 if name == "tiny" else 15
        ratios, harness_times = [], []
        for rep in range(reps):  # alternate who goes first
            order = (harness_step, raw_step) if rep % 2 == 0 else (raw_step, harness_step)
            times = {fn.__name__: fn(name, steps) for fn in order}
            ratios.append(times["harness_step"] / times["raw_step"])
            harness_times.append(times["harness_step"])
        figures[name] = round(statistics.median(ratios), 3)
        details[name] = {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "reps": reps,
            "harness_step_s": statistics.median(harness_times),
        }
        results[f"loop {name}"] = (figures[name], figures[name] <= TARGETS[name])
    write("loop", figures, {"targets": TARGETS, "harness_over_raw": details})

    model, batch = reference("small")
    params = sum(p.numel() for p in model.parameters())
    tokens = batch["input_ids"].numel()
    ceiling = statistics.median(matmul_ceiling() for _ in range(3))
    achieved = 6 * params * tokens / details["small"]["harness_step_s"]
    mfu = round(achieved / ceiling, 3)
    write(
        "mfu",
        {"small": mfu},
        {
            "target": MFU_TARGET,
            "params": params,
            "tokens_per_step": tokens,
            "achieved_flops": achieved,
            "matmul_ceiling_flops": ceiling,
        },
    )
    results["mfu small"] = (mfu, mfu >= MFU_TARGET)
    return results
