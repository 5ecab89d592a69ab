"""Whole-process wall time of the quickest verdict, and where it goes.

startup.json: {"overfit_n1_s": t, "preflight_s": t, "imports_s": t}: `python train.py mode=overfit n=1`
end to end (median of 3 runs), the preflight's share (from its verdict), and the imports' share (a
process that only imports what train.py imports, less an empty interpreter)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import OUT, write

TARGETS = {"overfit_n1_s": 8.0, "preflight_s": 3.0}
IMPORTS = "import harness.cli, harness.train.run, harness.checks.preflight, pytorch_lightning, hydra"


def wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def main(reps: int = 3) -> dict:
    runs, preflight = [], []
    for i in range(reps):
        run_dir = OUT / "startup" / str(i)
        runs.append(wall([sys.executable, "train.py", "mode=overfit", "n=1", f"hydra.run.dir={run_dir}"]))
        preflight.append(json.loads(Path(run_dir, "verdict.json").read_text())["preflight_seconds"])
    imports = [
        wall([sys.executable, "-c", IMPORTS]) - wall([sys.executable, "-c", "pass"]) for _ in range(reps)
    ]
    figures = {
        "overfit_n1_s": round(statistics.median(runs), 2),
        "preflight_s": round(statistics.median(preflight), 2),
        "imports_s": round(statistics.median(imports), 2),
    }
    write(
        "startup",
        figures,
        {"targets": TARGETS, "runs_s": runs, "preflight_s": preflight, "imports_s": imports},
    )
    return {k: (v, v <= TARGETS.get(k, float("inf"))) for k, v in figures.items()}
