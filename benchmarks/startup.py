"""Whole-process wall time of the quickest verdict, in startup.json: `ratio`, `python train.py mode=overfit n=1` over a
bare `python -c "import torch, pytorch_lightning"`, both in a core-only install (target <= 1.5); `extras_cost`, the same
run with every extra over the core-only run (<= 1.10); the medians in seconds and the preflight's share."""

# The core-only environment is made once under outputs/bench/core-venv (the same torch as this one, then `pip
# install .` with no extra) and made again when pyproject.toml changes. The three commands run interleaved, `reps`
# times each, in fresh processes; the figures are ratios of medians.

from __future__ import annotations

import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import OUT, write
from harness.report.verdict import read_verdict

TARGETS = {"ratio": 1.5, "extras_cost": 1.10}
ROOT = Path(__file__).resolve().parents[1]
BARE = "import torch, pytorch_lightning"


def core_python() -> Path:
    """The python of a core-only environment of this project, made (or made again) as needed."""
    venv = OUT / "core-venv"
    python = venv / "bin" / "python"
    stamp = venv / ".pyproject-sha256"
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    import torch

    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}"], check=True)
    subprocess.run([*pip, str(ROOT)], check=True)  # the core: no extra
    stamp.write_text(wanted)
    return python


def wall(command: list[str], env: dict | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, stdin=subprocess.DEVNULL, cwd=ROOT, env=env)
    return time.perf_counter() - started


def main(reps: int = 5) -> dict:
    core = str(core_python())
    seconds = {"bare": [], "core_run": [], "extras_run": []}
    preflight = []
    for i in range(reps):
        for side in ("bare", "core_run", "extras_run") if i % 2 == 0 else ("extras_run", "core_run", "bare"):
            if side == "bare":
                seconds[side].append(wall([core, "-c", BARE]))
                continue
            run_dir = OUT / "startup" / f"{side}-{i}"
            python = core if side == "core_run" else sys.executable
            # the core environment's dependencies, this checkout's code (its installed copy is as old as the venv)
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src")} if side == "core_run" else None
            command = [
                python,
                "train.py",
                "mode=overfit",
                "n=1",
                f"hydra.run.dir={run_dir}",
                "+overwrite=true",
            ]
            seconds[side].append(wall(command, env))
            preflight.append(read_verdict(run_dir)["preflight_seconds"])
    median = {side: statistics.median(values) for side, values in seconds.items()}
    figures = {
        "ratio": round(median["core_run"] / median["bare"], 3),
        "extras_cost": round(median["extras_run"] / median["core_run"], 3),
        "overfit_n1_s": round(median["core_run"], 2),
        "bare_s": round(median["bare"], 2),
        "extras_run_s": round(median["extras_run"], 2),
        "preflight_s": round(statistics.median(preflight), 2),
    }
    write("startup", figures, {"targets": TARGETS, "seconds": seconds, "preflight_s": preflight})
    return {k: (v, v <= TARGETS[k] if k in TARGETS else None) for k, v in figures.items()}
