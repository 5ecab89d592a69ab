"""A parallel sweep against a sequential one, in sweep.json: the wall time of the same 3-length overfit sweep, each a
real `python train.py -m ...` from start-up to summary, with hydra/launcher=parallel (joblib, 2 workers, one torch
thread each) over hydra/launcher=basic; the median ratio over `pairs` pairs, each with the machine's load."""

# What it measures is what a user waits for: start-up, the joblib workers' own start-up, the jobs, and the summary.
# Each job runs a fixed 300 steps (target_loss=0 never stops early), so both launchers do the same work, and enough
# of it that the jobs, not the start-up, dominate. The lengths go longest first: joblib hands out jobs in order, so
# the longest job starts at once and the two short ones share the other worker. The two launchers alternate in who
# goes first.
#
# Three jobs on two workers cannot beat 2/3 by parallelism alone when the jobs cost the same. What moves the ratio
# further is threads: the basic launcher runs every job with one intra-op thread per core, each joblib worker with
# one. A small model's ops gain little from a second thread, and where another process holds a core they lose a
# great deal (a 256x256 elementwise op measured 0.1 ms on one thread, 32 ms on two, on the shared 2-core machine
# this was written on). So the figure depends on the machine's load. There, with OMP_NUM_THREADS=1 for both
# launchers, the same sweep measured joblib / basic = 1.5-1.6 under a load of ~2.5: the whole gain was the thread
# count, not parallelism.

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import write

TARGET = 0.65  # joblib on 2 workers takes at most this fraction of the basic launcher's wall time
ROOT = Path(__file__).resolve().parents[1]
SWEEP = (
    "data.length=200,50,10",
    "mode=overfit",
    "n=2",
    "mode.max_steps=300",
    "mode.target_loss=0",
    "preflight=false",
)
LAUNCHERS = {
    "joblib": ("hydra/launcher=parallel", "hydra.launcher.n_jobs=2"),
    "basic": ("hydra/launcher=basic",),
}


def sweep_seconds(launcher: str, work: Path, data_root: Path, rep: int, *extra: str) -> float:
    """Wall time of one whole `train.py -m` sweep with `launcher` (a key of LAUNCHERS)."""
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        "-m",
        *SWEEP,
        *LAUNCHERS[launcher],
        f"data.root={data_root}",
        f"hydra.sweep.dir={work}/{launcher}-{rep}",
        *extra,
    ]
    started = time.perf_counter()
    result = subprocess.run(
        command, cwd=work, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{launcher} sweep failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return seconds


def main(pairs: int = 3) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        work, data_root = Path(tmp), Path(tmp) / "data"
        sweep_seconds("basic", work, data_root, -1, "mode.max_steps=1")  # untimed: generates the datasets
        runs = []
        for rep in range(pairs):
            order = ("joblib", "basic") if rep % 2 == 0 else ("basic", "joblib")  # alternate who goes first
            seconds = {launcher: sweep_seconds(launcher, work, data_root, rep) for launcher in order}
            load = round(os.getloadavg()[1], 2)  # 5-minute load: how busy the machine was (see the docstring)
            runs.append(
                {
                    "first": order[0],
                    **{k: round(v, 2) for k, v in seconds.items()},
                    "ratio": round(seconds["joblib"] / seconds["basic"], 3),
                    "load_5min": load,
                }
            )
            print(f"  pair {rep + 1}/{pairs}: {runs[-1]}", flush=True)
    ratios = [run["ratio"] for run in runs]
    value = round(statistics.median(ratios), 3)
    write(
        "sweep",
        {"joblib_vs_basic": value},
        {
            "target": f"<= {TARGET}",
            "measures": "wall time of `train.py -m " + " ".join(SWEEP) + "`, joblib (2 workers) "
            "/ basic launcher, start-up to summary",
            "median": value,
            "min": min(ratios),
            "max": max(ratios),
            "pairs": runs,
        },
    )
    return {"joblib_vs_basic": (value, value <= TARGET)}
