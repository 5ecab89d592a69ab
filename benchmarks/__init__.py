"""Benchmarks: every figure is a ratio of two things timed interleaved in one process, so the noise of
a shared machine hits both sides alike. `python -m benchmarks [NAME ...]` runs them (make bench)."""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

OUT = Path("outputs/bench")


def timed(fn: Callable[[], object], inner: int) -> float:
    """Seconds per call of `fn`, over `inner` calls."""
    started = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - started) / inner


def ratio(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    reps: int = 7,
    inner: int = 10,
    warmup: int = 2,
) -> dict:
    """time(candidate) / time(baseline), measured in alternation `reps` times: median, min and max."""
    for _ in range(warmup):
        candidate(), baseline()
    ratios = []
    for rep in range(reps):
        pair = (candidate, baseline) if rep % 2 == 0 else (baseline, candidate)  # alternate who goes first
        times = {id(fn): timed(fn, inner) for fn in pair}
        ratios.append(times[id(candidate)] / times[id(baseline)])
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "reps": reps}


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def write(name: str, figures: dict, details: dict) -> Path:
    """outputs/bench/NAME.json holds `figures` (what targets are judged on); NAME.details.json the spread."""
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(figures, indent=2) + "\n")
    (OUT / f"{name}.details.json").write_text(json.dumps({"machine": machine(), **details}, indent=2) + "\n")
    return OUT / f"{name}.json"
