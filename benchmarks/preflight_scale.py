"""What the preflight costs at a real language-model size (GPT-2 small's width and depth), in preflight_scale.json:
`steps`, one `run_preflight` in training steps of the same model (target <= 10), and `memory`, the preflight's peak
resident memory over a training step's (target <= 1.5); the details hold the raw seconds and bytes, and each check's."""

# Setup: `HFCausalLM(arch="gpt2")`, random init, on the synthetic data at `length` tokens, in a `HarnessModule`; the
# preflight is the real `run_preflight` with a config composed from conf/train.yaml, and the `precision` row a one-
# process run reads as training starts. Its model checks run on a sample batch of 4 training examples; the step it
# is compared with trains on the same 4 examples (forward, masked loss, backward, AdamW step, zero_grad): the
# conservative comparison, a real run's batch being larger. The step's AdamW runs at learning rate 0 (the same work;
# the weights stay at their initialization, so every preflight checks the model a run would check).
#
# Time, in one process: a warm-up step, then steps and preflights in alternation (`step_reps` steps between two
# preflights); the figure is the ratio of the medians. The first preflight runs cold, as in a real run.
#
# Memory: the peak RSS of each phase (Linux: reset by writing 5 to /proc/self/clear_refs, read as VmHWM from
# /proc/self/status; elsewhere a thread sampling /proc/self/statm). The preflight's peak is that of the first
# preflight, before any optimizer exists (as in a run). The step's peak is that of the `step_reps` steps after the
# first: AdamW's state is then resident through forward and backward, while the first step creates it only after
# backward has freed the activations (its lower peak is in the details). Before each reset freed memory is handed
# back to the system (malloc_trim), so that neither phase inherits the other's.
#
# Threads: both sides run with the bench's torch threads (BENCH_THREADS, default 1); `run_preflight` keeps them at
# this size (it takes one thread for a small model only).

from __future__ import annotations

import ctypes
import gc
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch

from benchmarks import write

TARGETS = {"steps": 10.0, "memory": 1.5}
CONF = Path(__file__).resolve().parents[1] / "conf"
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
CLOCK_PLUGIN = "_harness_bench_preflight_clock"  # the module name the per-check clock is loaded by


class PeakMemory:
    """The process's peak resident bytes from `reset()` to `read()`: the kernel's VmHWM where
    /proc/self/clear_refs can reset it, otherwise a thread sampling /proc/self/statm every `every_s`."""

    def __init__(self, every_s: float = 0.002):
        self.every_s = every_s
        self.kernel = self._can_reset()
        self._peak, self._stop, self._thread = 0, threading.Event(), None

    @staticmethod
    def _can_reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return PeakMemory._status("VmHWM") > 0
        except OSError:
            return False

    @staticmethod
    def _status(key: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024  # kB
        return 0

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE

    def reset(self) -> int:
        """Hand freed memory back to the system, start a new peak; returns the resident bytes now."""
        gc.collect()
        trim = getattr(_libc(), "malloc_trim", None)
        if trim is not None:
            trim(0)
        self.stop()
        if self.kernel:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        else:
            self._peak, self._stop = self.rss(), threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self.rss()

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self._peak = max(self._peak, self.rss())

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def read(self) -> int:
        """The peak resident bytes since the last reset."""
        if self.kernel:
            return self._status("VmHWM")
        self.stop()
        return max(self._peak, self.rss())


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def compose(root: Path, d_model: int, layers: int, heads: int, length: int):
    """The config train.py would compose for this model and data (run_preflight and the checks read it)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    overrides = [
        "model=hf",
        "model.arch=gpt2",
        f"model.d_model={d_model}",
        f"model.layers={layers}",
        f"model.heads={heads}",
        f"data.length={length}",
        f"data.root={root}",
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        return hydra_compose(config_name="train", overrides=overrides)


def timed_once(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


class Subject:
    """The model under test, built as train.py builds it, with its two workloads: the preflight and a step."""

    def __init__(self, root: Path, d_model: int, layers: int, heads: int, length: int):
        from harness.checks import sample_batch
        from harness.data import SyntheticDataModule
        from harness.models import HFCausalLM
        from harness.train.module import HarnessModule

        self.cfg = compose(root, d_model, layers, heads, length)
        self.data = SyntheticDataModule(length=length, root=str(root))
        self.data.prepare_data()
        self.data.setup("fit")
        torch.manual_seed(self.cfg.seed)
        vocab = self.data.tokenizer.vocab_size
        model = HFCausalLM(vocab, arch="gpt2", d_model=d_model, layers=layers, heads=heads, max_len=length)
        self.module = HarnessModule(model)
        self.batch = sample_batch(
            self.data.train_dataset, 4
        )  # the examples the preflight's model checks run on
        self.optimizer = None
        self.check_seconds: dict[str, list[float]] = {}
        self.failed: dict[str, str] = {}

    def preflight(self) -> None:
        """The preflight's rows, and the one read as training starts on one process (`precision`: one forward and
        the loss, in the Trainer's precision, here fp32), as a run meets them."""
        from harness.checks.at_start.precision import precision
        from harness.checks.preflight import run_preflight

        rows = run_preflight(self.module, self.data, self.cfg)
        started = time.perf_counter()
        setting = "trainer.precision=32-true"
        row = precision(
            self.module.model, self.batch, self.module.loss, nullcontext(), torch.float32, setting
        )
        rows.append({**row.as_dict(), "seconds": time.perf_counter() - started})
        for row in rows:
            self.check_seconds.setdefault(row["name"], []).append(row["seconds"])
            if row["status"] == "FAIL":
                self.failed[row["name"]] = row["detail"]

    def step(self) -> None:
        if self.optimizer is None:
            self.optimizer = self.module.configure_optimizers()
            for group in self.optimizer.param_groups:  # AdamW's every operation, at learning rate 0: each
                group["lr"] = 0.0  # preflight sees the model at init, as in a run (trained, init_loss fails)
        batch = self.batch
        loss = self.module.loss(self.module.model(batch["input_ids"]), batch["targets"], batch["loss_mask"])
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def measure(subject: Subject, preflight_runs: int, step_reps: int) -> dict:
    """Seconds and peak bytes of each workload, in the order a run meets them."""
    memory = PeakMemory()
    # the preflight as in a run: cold, right after the model and data, no optimizer yet
    raw = {"preflight_start": memory.reset(), "preflight_s": [timed_once(subject.preflight)]}
    raw["preflight_peak"] = memory.read()
    # the first step creates AdamW's state, after backward: the steps after it hold it through backward
    raw["first_start"] = memory.reset()
    raw["warmup_s"] = timed_once(subject.step)
    raw["first_peak"] = memory.read()
    # then steps and preflights in turn; the first block's peak is the training step's
    raw["step_start"] = memory.reset()
    raw["step_s"] = [[timed_once(subject.step) for _ in range(step_reps)]]
    raw["step_peak"] = memory.read()
    raw["method"] = (
        "VmHWM reset through /proc/self/clear_refs" if memory.kernel else "a thread sampling /proc/self/statm"
    )
    memory.stop()
    for _ in range(preflight_runs - 1):
        raw["preflight_s"].append(timed_once(subject.preflight))
        raw["step_s"].append([timed_once(subject.step) for _ in range(step_reps)])
    return raw


def main(
    d_model: int = 768,
    layers: int = 12,
    heads: int = 12,
    length: int = 256,
    preflight_runs: int = 2,
    step_reps: int = 3,
) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-preflight-") as root:
        subject = Subject(Path(root), d_model, layers, heads, length)
        raw = measure(subject, preflight_runs, step_reps)
    steps_all = [s for block in raw["step_s"] for s in block]
    step_median, preflight_median = statistics.median(steps_all), statistics.median(raw["preflight_s"])
    figures = {
        "steps": round(preflight_median / step_median, 3),
        "memory": round(raw["preflight_peak"] / raw["step_peak"], 3),
    }
    checks = {
        name: {"median_s": round(statistics.median(s), 4), "runs_s": [round(x, 4) for x in s]}
        for name, s in sorted(subject.check_seconds.items(), key=lambda item: -statistics.median(item[1]))
    }
    setup = {"arch": "gpt2", "d_model": d_model, "layers": layers, "heads": heads, "length": length}
    setup["vocab_size"] = subject.data.tokenizer.vocab_size
    setup["parameters"] = sum(p.numel() for p in subject.module.parameters())
    setup["batch"] = list(subject.batch["input_ids"].shape)
    details = {
        "targets": {k: f"<= {v}" for k, v in TARGETS.items()},
        "setup": setup,
        "steps": {
            "preflight_s": raw["preflight_s"],
            "preflight_median_s": preflight_median,
            "step_s": raw["step_s"],
            "step_median_s": step_median,
            "warmup_step_s": raw["warmup_s"],
            "min": min(raw["preflight_s"]) / max(steps_all),
            "max": max(raw["preflight_s"]) / min(steps_all),
            "note": "the first preflight runs cold (pytest set-up, first imports), as in a run",
        },
        "memory": {
            "method": raw["method"],
            **{
                f"{k}_bytes": raw[k] for k in ("preflight_peak", "preflight_start", "step_peak", "step_start")
            },
            "step_note": f"the {step_reps} steps after the first, AdamW's state in place",
            "first_step_peak_bytes": raw["first_peak"],
            "first_step_start_bytes": raw["first_start"],
            "preflight_over_first_step": raw["preflight_peak"] / raw["first_peak"],
        },
        "checks_s": checks,
        "failed_checks": subject.failed,  # the benchmark times them all the same
    }
    write("preflight_scale", figures, details)
    return {k: (v, v <= TARGETS[k]) for k, v in figures.items()}
