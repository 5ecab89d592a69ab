"""What the probes and the checks of scaled training cost under sharding, on two ranks of `trainer=fsdp` (and of
trainer=ddp) with `model=gpt model.size=small`, in fsdp.json: `probes` (median step time every probe on / none,
target <= 1.05), `probe_hooks`, `rank_agreement` (<= 1.01), `step_loss`, `watchdog` (<= 1.01) and `scale_checks`."""

# Method: benchmarks.probes' comparison (one Trainer, every probe on / none, in alternating blocks of steps) run by
# two processes at once, each a rank (FSDP2 through harness.train.distributed.sharding.FSDP; gloo on CPU). Under
# sharding the probes do more than without: the per-layer norms, update ratios and histograms are made of each
# rank's slices and reduced across the ranks once a logging step (harness.train.distributed.shard_sums), and the
# probes that run forward passes of their own all-gather the weights as training does. `probe_hooks` is 1 + the
# probes' own hook time over a step without them.
#
# How: `python -m benchmarks fsdp` starts torchrun with two processes on this machine, one torch thread each; each
# runs worker() with the same schedule of variants, so both ranks switch at the same step, and rank 0 writes the
# figures.
#
# The checks of scaled training: one Trainer each under trainer=fsdp and trainer=ddp, both checks on against both
# off in alternating blocks. `rank_agreement` (harness.probes.layers.agreement: the replicated weights' checksums
# and the step count compared across the ranks every 10 steps; under FSDP the step count alone) is 1 + the probe's
# own time over a step (`rank_agreement_ddp` the same under DDP); `step_loss` (harness.train.step_loss: one all-
# reduce of two numbers and the gradients rescaled) is 1 + its own time over a step, no target; `watchdog`
# (harness.train.distributed.watchdog: two counters a step, a heartbeat written and every rank's read once a second)
# the same. `scale_checks` is the step-time ratio of both on over both off: the machine moves a block of 10 steps by
# a few percent, more than these checks cost, so it says only that nothing larger hides outside their own time.

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch

from benchmarks import OUT, write
from harness.ranks import global_rank

TARGET = 1.05
SCALE_TARGET = 1.01  # the per-step checks of scaled training: at most 1% of a step
PROCESSES = 2
MODEL = "small"  # benchmarks.probes.MODELS: model=gpt model.size=small, 8 x 128 tokens a step
#: the watchdog's parts the scale checks clock: its per-step counters and its thread's beats (RankWatch methods)
WATCHDOG_PARTS = ("publish", "fault_now", "on_train_batch_end")
SCALE_INNER = 20  # steps of each variant per repetition of the scale checks (a multiple of their period, 10)


def main(reps: int = 3, scale_reps: int = 2) -> dict:
    """Run worker() on PROCESSES ranks under torchrun; {figure: (value, target met)} from what rank 0 wrote."""
    (OUT / "fsdp.json").unlink(missing_ok=True)  # never an earlier run's figures
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={PROCESSES}"]
    subprocess.run(
        [*command, "-m", "benchmarks.fsdp", str(reps), str(scale_reps)],
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    figures = json.loads((OUT / "fsdp.json").read_text())
    met = figures["probes"] <= TARGET and figures["probe_hooks"] <= TARGET
    out = {
        "probes": (figures["probes"], met),
        "probe_hooks": (figures["probe_hooks"], figures["probe_hooks"] <= TARGET),
    }
    for suffix in ("", "_ddp"):
        agreement = figures[f"rank_agreement{suffix}"]
        out[f"rank_agreement{suffix}"] = (agreement, agreement <= SCALE_TARGET)
        out[f"step_loss{suffix}"] = (figures[f"step_loss{suffix}"], None)
        watchdog = figures[f"watchdog{suffix}"]
        out[f"watchdog{suffix}"] = (watchdog, watchdog <= SCALE_TARGET)
        out[f"scale_checks{suffix}"] = (figures[f"scale_checks{suffix}"], None)
    return out


def worker(reps: int, scale_reps: int) -> None:
    """One rank: benchmarks.probes.measure on a sharded Trainer of PROCESSES devices, then scale_checks under FSDP
    and under DDP; rank 0 writes fsdp.json."""
    from benchmarks.probes import CHUNK, INNER, MODELS, measure
    from harness.train.distributed.sharding import FSDP

    torch.set_num_threads(1)
    os.environ.setdefault("WANDB_MODE", "offline")
    result = measure(MODEL, reps, figures=("probes",), name="fsdp", strategy=FSDP(), devices=PROCESSES)[
        "probes"
    ]
    scale = {"": scale_checks(scale_reps, "fsdp", FSDP()), "_ddp": scale_checks(scale_reps, "ddp", "ddp")}
    if global_rank() != 0:
        return
    reference = MODELS[MODEL]
    figures = {"probes": round(result["median"], 3), "probe_hooks": round(1 + result["hooks_share"], 3)}
    for suffix, measured in scale.items():
        figures[f"scale_checks{suffix}"] = round(measured["median"], 4)
        for check in ("rank_agreement", "step_loss", "watchdog"):
            figures[f"{check}{suffix}"] = round(1 + measured["hooks_share"][check], 4)
    details = {
        "target": {
            "probes": f"<= {TARGET}",
            "probe_hooks": f"<= {TARGET}",
            "rank_agreement": f"<= {SCALE_TARGET}",
            "rank_agreement_ddp": f"<= {SCALE_TARGET}",
            "watchdog": f"<= {SCALE_TARGET}",
            "watchdog_ddp": f"<= {SCALE_TARGET}",
        },
        "model": f"{reference.model.__name__}({reference.kwargs})",
        "batch_size_per_rank": reference.batch_size,
        "processes": PROCESSES,
        "strategy": "trainer=fsdp (FSDP2, gloo); the scale checks also under trainer=ddp (`_ddp`)",
        "steps_per_variant_per_repetition": INNER,
        "chunk": CHUNK,
        "probes_over_none": result,
        "scale_checks_on_over_off": scale,
        "scale_steps_per_variant_per_repetition": SCALE_INNER,
        "scale_repetitions": scale_reps,
    }
    write("fsdp", figures, details)


def scale_checks(reps: int, name: str, strategy) -> dict:
    """compare() of the checks of scaled training on (the ranks' checksum probe, the module weighing every token of
    the step alike) over off (no probe, each rank's mean averaged: the module told it runs alone), with each
    check's own milliseconds a step and their share of a step without them (`hooks_share`: {check: share}). One
    Trainer of PROCESSES ranks under `strategy`."""
    from benchmarks import OUT
    from benchmarks.probes import Bench, compare, timed_hooks
    from harness.probes import ProbeSet
    from harness.probes.layers.agreement import RankAgreement
    from harness.train.distributed.watchdog import RankWatch

    clocks = {"rank_agreement": [0.0], "step_loss": [0.0], "watchdog": [0.0]}
    # the watchdog: its per-step counters on the training thread, and its thread's beats (a heartbeat written and
    # every rank's read, once a second), on one clock. The thread beats whichever variant runs.
    watch = RankWatch(
        OUT / "probes_runs" / f"scale_{name}", stall_s=300, beat_s=1, silent_s=10, on_fault=lambda _: 1
    )
    for part in WATCHDOG_PARTS:
        setattr(watch, part, clocked(getattr(watch, part), clocks["watchdog"]))
    agreement = [*timed_hooks([ProbeSet([RankAgreement(every=10)])], clocks["rank_agreement"]), watch]

    def use(on: bool):
        def switch(bench) -> None:
            module = bench.module
            if "weigh" not in vars(module.step_loss):  # the weighing's own time (both halves), on its clock
                for part in ("weigh", "normalize"):
                    setattr(
                        module.step_loss, part, clocked(getattr(module.step_loss, part), clocks["step_loss"])
                    )
            bench.use(agreement if on else [])
            if on:
                vars(module).pop("data_parallel", None)
            else:  # as if alone: each rank's mean, averaged by the strategy
                module.data_parallel = lambda: (1, 1)

        return switch

    bench = Bench(
        f"scale_{name}",
        MODEL,
        agreement,
        [],
        {"off": use(False), "on": use(True)},
        strategy=strategy,
        devices=PROCESSES,
    )
    try:
        bench.run("on", SCALE_INNER)  # past the first steps
        for clock in clocks.values():
            clock[0] = 0.0
        result = compare(bench, "on", "off", reps, SCALE_INNER)
        seconds = {check: clock[0] for check, clock in clocks.items()}  # before the watchdog's last beats
        seconds["watchdog"] /= 2  # its thread beat through both variants' steps: half are the "on" steps'
    finally:
        bench.close()
        watch.close("ended")
    off_ms = result["ms_per_step"]["off"]
    per_step = {check: 1e3 * s / (reps * SCALE_INNER) for check, s in seconds.items()}
    result["hooks_ms_per_step"] = {check: round(ms, 3) for check, ms in per_step.items()}
    result["hooks_share"] = {check: round(ms / off_ms, 5) for check, ms in per_step.items()}
    return result


def clocked(fn, clock: list[float]):
    """`fn`, adding the seconds each call takes to clock[0]."""

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clock[0] += time.perf_counter() - started

    return timed


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]))
