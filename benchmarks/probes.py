"""What the probes cost, in probes.json: the step time of a real Lightning training step with every probe on over the
same step with none (`small` target 1.02, `gpt2` 1.05), the same for `wandb.watch(model, log="all", log_freq=10)`,
and what the symptoms add (`symptoms`); each a median ratio over repetitions with its spread."""

# How: each comparison runs in one Trainer, fitting in a thread of its own and parked at the start of every batch by
# a `Gate` callback. `Bench.run(variant, steps)` switches the variant on (the probes' callback in or out of the
# Trainer's list; wandb.watch on or off the model), then lets `steps` batches through, each a whole loop iteration.
# The variants take turns every CHUNK steps (see `schedule`), so that the machine's slow and fast seconds fall on
# both. Both spread and median matter on a shared machine: two identical Trainers there differ by up to ±8%, and the
# same Trainer's step time drifts by tens of percent over a minute when a neighbour gets busy, while the small
# model's target is 2%.
#
# The reference models (MODELS), each measured at least 3 times: `tiny`, the built-in transformer at its smallest
# (also the floor and the symptoms' share); `small`, `model=gpt model.size=small`; `gpt2`, GPT-2 small's size and
# vocabulary (124M parameters), with wandb.watch measured beside it.
#
# Setup: language modelling on random tokens (every position in the loss), the harness's own CSV logger and its
# always-on callbacks (non-finite guard, resume state), mode=full's log_every_n_steps=10, no validation. `probes` is
# the overfit-mode set (all probes): mode=full runs a subset of it. The details file adds the milliseconds a step
# spends inside the probes' own hooks (an estimate the machine's noise moves less: it leaves out Lightning's
# dispatch, the activations probe's forward hooks and the probes' memory traffic), and the floor (see Floor). The
# checks that run only on several ranks are measured by benchmarks.fsdp.

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

from benchmarks import OUT, write
from harness.config.groups.probes import Probes
from harness.data.dataset import CharDataset
from harness.data.tokenizer import CharTokenizer
from harness.models import GPT, Transformer
from harness.probes import build_probes
from harness.train.checkpoints import ResumeState
from harness.train.loggers import build_loggers
from harness.train.module import HarnessModule, step_stats
from harness.train.nonfinite import NonFiniteGuard


class Reference(NamedTuple):
    """A reference model: its class and arguments, the batch size and vocabulary; `figures`: the comparisons
    measured (FIGURES, or the first of them); `reps`: repetitions of each (None: main()'s); `warmup`: steps of
    each variant run before the first repetition (past the one-off costs: first steps, lazy imports); `threads`:
    torch's threads while it is measured (None: main()'s)."""

    model: type
    kwargs: dict
    batch_size: int
    vocab: int = 256
    figures: tuple[str, ...] = ("probes", "floor", "symptoms", "wandb_watch")
    reps: int | None = None
    warmup: int = 20
    threads: int | None = None


MODELS = {
    "tiny": Reference(Transformer, dict(d_model=32, layers=2, heads=4, max_len=32), 4),
    # model=gpt model.size=small (d_model 384, 6 layers, 6 heads: 10.6M parameters outside the embeddings); a
    # step takes most of a second on one CPU thread: three repetitions, no floor
    "small": Reference(
        GPT, dict(size="small", max_len=128), 8, figures=("probes", "wandb_watch"), reps=3, warmup=5
    ),
    # GPT-2 small's own size and vocabulary (124M parameters), a short sequence: 1.75 s a step on one CPU thread,
    # 1.05 s on two: both cores, so that three repetitions of 200 steps fit in make bench's half hour
    "gpt2": Reference(
        GPT,
        dict(size="gpt2", max_len=64),
        2,
        vocab=50257,
        figures=("probes", "wandb_watch"),
        reps=3,
        warmup=3,
        threads=2,
    ),
}
TARGETS = {"tiny": 1.25, "small": 1.02, "gpt2": 1.05}  # probes on / off, at most
SYMPTOM_PROBES = ("activations", "symptoms")  # what the symptoms add to the probes
#: a Trainer that trains and logs as mode=full does (every 10 steps), with nothing else: no validation, no
#: checkpoint, no progress bar, no summary
BARE_TRAINER = dict(
    limit_val_batches=0,
    num_sanity_val_steps=0,
    log_every_n_steps=10,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
SYMPTOMS_TARGET = 1.02  # every probe / every probe but those, at most
INNER = 100  # steps of each variant per repetition: a multiple of every default period (1, 10, 20, 50, 100)
WATCH_INNER = 20  # the same for wandb.watch (log_freq 10)
CHUNK = 10  # steps run in one variant before switching to the other
HOOKS = ("on_train_batch_start", "on_before_optimizer_step", "on_train_batch_end")  # the per-step ones


class RandomTokens(pl.LightningDataModule):
    """Next-token prediction on random tokens over `vocab` characters, held in memory."""

    def __init__(self, length: int, batch_size: int, vocab: int = 256, size: int = 2048, seed: int = 0):
        super().__init__()
        rng = random.Random(seed)
        self.tokenizer = CharTokenizer("".join(chr(0x100 + i) for i in range(vocab)))  # printable, distinct
        records = [
            {"text": "".join(rng.choice(self.tokenizer.alphabet) for _ in range(length + 1))}
            for _ in range(size)
        ]
        self.train_dataset = CharDataset(records, self.tokenizer, "lm", length)
        self.val_dataset = CharDataset(records[:64], self.tokenizer, "lm", length)
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_dataset, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(
        self,
    ) -> DataLoader:  # never run (limit_val_batches=0): the datapoints probe collates by it
        return DataLoader(self.val_dataset, batch_size=self.batch_size)


class Gate(pl.Callback):
    """Parks the fit loop at the start of every batch, before the other callbacks' batch start (it comes
    first); `step()` lets one batch through and waits until the loop is parked at the next: all of a batch's
    work, its logging after the callbacks' batch end included, falls between two parks."""

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
    share of a step, a second figure beside the ratio."""
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


class Bench:
    """One Trainer fitting in its own thread, run a block of batches at a time in one variant or another.

    `switches`: variant -> a function that turns the variant on (it gets this Bench). The Trainer starts with
    `callbacks` (every variant's, so that each sees fit and train start); `where`: the Trainer's accelerator,
    devices and strategy, when not one CPU (benchmarks.fsdp: two sharded ranks, each running the same Bench)."""

    def __init__(self, name: str, model_name: str, callbacks: list, loggers: list, switches: dict, **where):
        reference = MODELS[model_name]
        torch.manual_seed(0)
        self.module = HarnessModule(reference.model(vocab_size=reference.vocab, **reference.kwargs))
        self.data = RandomTokens(reference.kwargs["max_len"], reference.batch_size, reference.vocab)
        self.base = [NonFiniteGuard(), ResumeState()]  # what every harness run has
        self.gate, self.switches, self.current = Gate(), switches, None
        self.trainer = pl.Trainer(
            max_steps=-1,
            max_epochs=-1,
            **BARE_TRAINER,
            logger=loggers,
            callbacks=[self.gate, *self.base, *callbacks],
            default_root_dir=OUT / "probes_runs" / model_name / name,
            # gpu: scripts/gpu_check.sh
            **{"accelerator": os.environ.get("BENCH_ACCELERATOR", "cpu"), "devices": 1, **where},
        )
        self.thread = threading.Thread(
            target=self.trainer.fit, args=(self.module,), kwargs={"datamodule": self.data}, daemon=True
        )
        assert self.trainer.callbacks[0] is self.gate, "the gate must run first"
        self.thread.start()
        self.gate.arrived.acquire()  # parked at the start of the first batch

    def use(self, callbacks: list) -> None:
        """Run the next batches with `callbacks` besides the harness's own. The list is changed in place while
        the loop is parked in the gate, the first of it: Lightning, iterating over that list, goes on from the
        second entry of the new one, so the whole of the next batch runs the new variant."""
        self.trainer.callbacks[:] = [self.gate, *self.base, *callbacks]

    def run(self, variant: str, steps: int) -> float:
        """Seconds for `steps` batches of `variant`."""
        if variant != self.current:
            self.switches[variant](self)
            self.current = variant
        started = time.perf_counter()
        for _ in range(steps):
            self.gate.step()
        return time.perf_counter() - started

    def close(self) -> None:
        self.trainer.should_stop = True
        self.gate.open = True
        self.gate.go.release()
        self.thread.join()


def schedule(inner: int) -> list[bool]:
    """One repetition's chunks, in order, True where the variant measured runs (False: the one it is measured
    against): 2 * `inner` steps in chunks of CHUNK, alternating, the order flipped halfway.

    Whatever step it starts at, each variant gets `inner` steps holding an equal share of the multiples of every
    period that divides `inner` (one in CHUNK a multiple of CHUNK, one in `inner` a multiple of `inner`, ...), so
    each carries its share of the every-K probes: a multiple m in the first half pairs with m + `inner` in the
    second, CHUNK-aligned alike, and the flip gives exactly one of the two to each variant. (It needs an even
    number of chunks a half: `inner` a multiple of 2 * CHUNK.) The machine's slower and faster seconds fall on
    both."""
    chunks, odd = divmod(inner, CHUNK)
    if odd or chunks % 2:
        raise ValueError(f"inner={inner} is not a multiple of 2 * CHUNK ({2 * CHUNK})")
    return [(chunk % 2 == 0) == (chunk < chunks) for chunk in range(2 * chunks)]


def compare(bench: Bench, on: str, off: str, reps: int, inner: int) -> dict:
    """time(on) / time(off) over `reps` repetitions of schedule(`inner`): median, min, max, and the milliseconds a
    step takes in each."""
    ratios, seconds = [], {on: 0.0, off: 0.0}
    for _ in range(reps):
        times = {on: 0.0, off: 0.0}
        for measured in schedule(inner):
            variant = on if measured else off
            times[variant] += bench.run(variant, CHUNK)
        ratios.append(times[on] / times[off])
        for variant, t in times.items():
            seconds[variant] += t
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "reps": reps,
        "ms_per_step": {v: round(1e3 * t / (reps * inner), 3) for v, t in seconds.items()},
    }


def compare_hooks(bench: Bench, variant: str, clock: list[float], reps: int, inner: int) -> dict:
    """compare() of `variant` against "off", with the milliseconds a step spends in the variant's own hooks (timed
    on `clock` by timed_hooks) and their share of a step without it (`hooks_share`)."""
    clock[0] = 0.0
    result = compare(bench, variant, "off", reps, inner)
    hooks_ms = 1e3 * clock[0] / (reps * inner)
    result["hooks_ms_per_step"] = round(hooks_ms, 3)
    result["hooks_share"] = round(hooks_ms / result["ms_per_step"]["off"], 5)
    return result


class Floor(pl.Callback):
    """The least that the items the probes must do every step can cost a step: the gradients' norms (the guard's,
    reused), the logits' statistics, one transfer to the host, and nothing logged. What lies between this and
    no probes, no work on the probes' own code can remove."""

    def on_train_start(self, trainer, pl_module) -> None:
        self.guard = next(cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.norms = self.guard.checked[1]  # the guard lets go of them at the end of the batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        stats = step_stats(outputs, batch)
        torch.cat([self.norms, stats.mean(dim=(1, 2))]).tolist()


def probes_bench(
    model_name: str,
    clocks: dict[str, list[float]],
    name: str = "probes",
    figures: tuple[str, ...] = ("probes",),
    **where,
) -> Bench:
    """A Trainer with the CSV logger, switching between no probes, every probe, and those of `figures` besides:
    every probe but the symptoms' (`symptoms`), the floor (`floor`); each variant's hooks on its own clock in
    `clocks`. Only the variants measured are built: each starts with the Trainer (a second probe set would run its
    own start-up passes, a forward and backward at GPT-2 size). `where`: as Bench's."""
    runs = OUT / "probes_runs" / model_name / name
    runs.mkdir(parents=True, exist_ok=True)
    loggers = build_loggers(OmegaConf.create({"name": "csv"}), runs)
    reference = MODELS[model_name]
    data = RandomTokens(reference.kwargs["max_len"], reference.batch_size, reference.vocab)
    everything = OmegaConf.structured(Probes)  # probes=default: its yaml keeps no value of its own
    probes = timed_hooks(build_probes(everything, run_dir=runs, data=data, overfit=True), clocks["probes"])
    lean, floor = [], []
    if (
        "symptoms" in figures
    ):  # every probe but what the symptoms add (the activations probe and the detectors)
        without = OmegaConf.merge(everything, {name: None for name in SYMPTOM_PROBES})
        lean = build_probes(without, run_dir=runs, data=data, overfit=True)
    if "floor" in figures:
        floor = timed_hooks([Floor()], clocks["floor"])
    switches: dict[str, Callable] = {
        "off": lambda b: b.use([]),
        "probes": lambda b: b.use(probes),
        "without_symptoms": lambda b: b.use(lean),
        "floor": lambda b: b.use(floor),
    }
    return Bench(name, model_name, [*probes, *lean, *floor], loggers, switches, **where)


def watch_bench(model_name: str) -> Bench:
    """A Trainer with the CSV and wandb loggers, switching wandb.watch(log="all", log_freq=10) on and off."""
    import wandb
    from pytorch_lightning.loggers import WandbLogger

    runs = OUT / "probes_runs" / model_name / "wandb"
    runs.mkdir(parents=True, exist_ok=True)
    loggers = [
        *build_loggers(OmegaConf.create({"name": "csv"}), runs),
        WandbLogger(save_dir=str(runs), project="harness-bench", offline=True),
    ]

    def watch(bench: Bench) -> None:
        # idx=0: the same metric names at every switch, as one watch in a run has (a new call counts up)
        wandb.watch(bench.module.model, log="all", log_freq=10, idx=0)

    def unwatch(bench: Bench) -> None:
        if bench.current == "wandb_watch":
            wandb.unwatch(bench.module.model)

    return Bench("wandb", model_name, [], loggers, {"off": unwatch, "wandb_watch": watch})


def measure(model_name: str, reps: int, figures: tuple[str, ...] | None = None, **where) -> dict:
    """{variant: compare() result against no probes} for one reference model, with the milliseconds a step
    spends inside the variant's own hooks and their share of a step without probes (`hooks_share`); the floor,
    the symptoms' share and wandb.watch where `figures` (by default the reference's) has them. `where`: the
    Trainer's devices and strategy, as probes_bench's (with its `name`)."""
    figures = figures or MODELS[model_name].figures
    reference = MODELS[model_name]._replace(figures=figures)
    threads = torch.get_num_threads()
    torch.set_num_threads(reference.threads or threads)
    try:
        return compared(model_name, reference, reps, **where)
    finally:
        torch.set_num_threads(threads)


def compared(model_name: str, reference: Reference, reps: int, **where) -> dict:
    """measure()'s figures, with torch's threads set."""
    clocks = {"probes": [0.0], "floor": [0.0]}
    results = {}
    bench = probes_bench(model_name, clocks, figures=reference.figures, **where)
    try:
        bench.run("probes", reference.warmup)  # past the one-off costs: first steps, lazy imports
        bench.run("off", reference.warmup)
        for variant in ("probes", "floor"):
            if variant not in reference.figures:
                continue
            variant_reps = reps if variant == "probes" else max(3, reps // 2)
            results[variant] = compare_hooks(bench, variant, clocks[variant], variant_reps, INNER)
        if "symptoms" in reference.figures:
            # a 2% target on a figure the machine moves by more: three times the repetitions where steps are quick
            symptom_reps = reps if reference.reps else 3 * reps
            results["symptoms"] = compare(bench, "probes", "without_symptoms", symptom_reps, INNER)
    finally:
        bench.close()
    if "wandb_watch" not in reference.figures:
        return results
    bench = watch_bench(model_name)
    try:
        bench.run("wandb_watch", min(reference.warmup, WATCH_INNER))
        bench.run("off", min(reference.warmup, WATCH_INNER))
        # blocks of 2 of its logging periods: enough for a per-step cost, and a fifth of the time
        results["wandb_watch"] = compare(bench, "wandb_watch", "off", reps, WATCH_INNER)
    finally:
        bench.close()
        import wandb

        wandb.finish()
    return results


def main(reps: int = 5, models: tuple[str, ...] = tuple(MODELS), threads: int | None = 1) -> dict:
    """Measure, write outputs/bench/probes.json (+ .details.json), return {figure: (value, target met, spread)}.

    probes.json: {model: {figure: median, ..., "spread": {figure: [min, max]}, "reps": {figure: n}}}.
    One torch thread by default: on a shared machine a second thread waits on whatever else runs there, and
    that noise (±10% and more on a 2-core machine) is larger than the 2% the small model's target allows.
    threads=None keeps torch's default."""
    if threads is not None:
        torch.set_num_threads(threads)
    os.environ["WANDB_MODE"] = "offline"  # before wandb is imported: no network
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_DIR", str(OUT / "probes_runs"))
    figures, details, out = {}, {}, {}
    for model_name in models:
        reference = MODELS[model_name]
        results = measure(model_name, reference.reps or reps)
        figures[model_name] = {
            **{name: round(result["median"], 3) for name, result in results.items()},
            "spread": {name: [round(r["min"], 3), round(r["max"], 3)] for name, r in results.items()},
            "reps": {name: result["reps"] for name, result in results.items()},
        }
        details[model_name] = {
            "model": f"{reference.model.__name__}({reference.kwargs})",
            "batch_size": reference.batch_size,
            "vocab": reference.vocab,
            "threads": reference.threads or torch.get_num_threads(),
            **results,
        }
        out.update(verdicts(model_name, figures[model_name], results))
    write(
        "probes",
        figures,
        {
            "target": {
                **{f"{m}/probes": f"<= {t}" for m, t in TARGETS.items()},
                **{f"{m}/wandb_watch": ">= the probes'" for m in TARGETS},
                "tiny/symptoms": f"<= {SYMPTOMS_TARGET}",
            },
            "steps_per_variant_per_repetition": INNER,
            "chunk": CHUNK,
            "threads": torch.get_num_threads(),
            "ratios_over_no_probes": details,
        },
    )
    return out


def verdicts(model_name: str, figures: dict, results: dict) -> dict:
    """{`model_name`/figure: (median, target met, (min, max, repetitions))} from one model's measure() `results`
    and their rounded `figures`; `probe_hooks` as (value, target met)."""

    def row(name: str, met: bool | None) -> tuple:
        return (figures[name], met, (*figures["spread"][name], results[name]["reps"]))

    ratio, hooks = figures["probes"], round(1 + results["probes"]["hooks_share"], 3)
    target = TARGETS[model_name]
    # the probes' own hook time as a ratio: an estimate of their cost that the machine's noise moves less than the
    # ratio of step times; the target counts as met only when both are within it
    out = {
        "probes": row("probes", ratio <= target and hooks <= target),
        "probe_hooks": (hooks, hooks <= target),
    }
    if "floor" in results:
        out["floor"] = row("floor", None)
    if "symptoms" in results:  # every probe / every probe but the symptoms'
        out["symptoms"] = row("symptoms", figures["symptoms"] <= SYMPTOMS_TARGET)
    if "wandb_watch" in results:
        # no target of its own: it is the one-liner the probes replace, so the probes should cost no more
        out["wandb_watch"] = row("wandb_watch", ratio <= figures["wandb_watch"])
    return {f"{model_name}/{name}": value for name, value in out.items()}
