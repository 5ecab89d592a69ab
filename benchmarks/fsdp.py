"""What the probes cost under sharding: benchmarks.probes' comparison (one Trainer, every probe on / none, in
alternating blocks of steps) run by two processes at once, each a rank of `trainer=fsdp` (FSDP2 through
harness.train.sharding.FSDP; gloo on CPU), on `model=gpt model.size=small`.

Under sharding the probes do more than without: the per-layer norms, update ratios and histograms are made of
each rank's slices and reduced across the ranks once a logging step (harness.train.whole), and the probes that
run forward passes of their own all-gather the weights as training does. fsdp.json: `probes`, the median step
time with every probe over none (target <= 1.05), and `probe_hooks`, 1 + the probes' own hook time over a
step without them.

How: `python -m benchmarks fsdp` starts torchrun with two processes on this machine, one torch thread each (the
2-core machine's two cores); each runs worker() with the same schedule of variants, so both ranks switch at
the same step, and rank 0 writes the figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from benchmarks import OUT, write
from harness.train.devices import global_rank

TARGET = 1.05
PROCESSES = 2
MODEL = "small"  # benchmarks.probes.MODELS: model=gpt model.size=small, 8 x 128 tokens a step


def main(reps: int = 3) -> dict:
    """Run worker() on PROCESSES ranks under torchrun; {figure: (value, target met)} from what rank 0 wrote."""
    (OUT / "fsdp.json").unlink(missing_ok=True)  # never an earlier run's figures
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={PROCESSES}"]
    subprocess.run(
        [*command, "-m", "benchmarks.fsdp", str(reps)], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    figures = json.loads((OUT / "fsdp.json").read_text())
    met = figures["probes"] <= TARGET and figures["probe_hooks"] <= TARGET
    return {
        "probes": (figures["probes"], met),
        "probe_hooks": (figures["probe_hooks"], figures["probe_hooks"] <= TARGET),
    }


def worker(reps: int) -> None:
    """One rank: benchmarks.probes.measure on a sharded Trainer of PROCESSES devices; rank 0 writes fsdp.json."""
    from benchmarks.probes import CHUNK, INNER, MODELS, measure
    from harness.train.sharding import FSDP

    torch.set_num_threads(1)
    os.environ.setdefault("WANDB_MODE", "offline")
    result = measure(MODEL, reps, figures=("probes",), name="fsdp", strategy=FSDP(), devices=PROCESSES)[
        "probes"
    ]
    if global_rank() != 0:
        return
    reference = MODELS[MODEL]
    figures = {"probes": round(result["median"], 3), "probe_hooks": round(1 + result["hooks_share"], 3)}
    details = {
        "target": {"probes": f"<= {TARGET}", "probe_hooks": f"<= {TARGET}"},
        "model": f"{reference.model.__name__}({reference.kwargs})",
        "batch_size_per_rank": reference.batch_size,
        "processes": PROCESSES,
        "strategy": "trainer=fsdp (FSDP2, gloo)",
        "steps_per_variant_per_repetition": INNER,
        "chunk": CHUNK,
        "probes_over_none": result,
    }
    write("fsdp", figures, details)


if __name__ == "__main__":
    worker(int(sys.argv[1]))
