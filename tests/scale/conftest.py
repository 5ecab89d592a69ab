"""What the tests of runs on several processes share: the short run they compare, a run's metrics.csv read
back by step with the values two runs do not share, and the gap between a step taken whole and split."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import torch

#: a whole run, short: synthetic data of length 12, plots off
SHORT = ["data.length=12", "probes.plots=false"]
# the figures compared between a sharded run and one process: the weights' and update ratios at every step, the
# histograms every 10 (the defaults: 20 and 100); past the first steps an entry at a bucket's edge may fall either
# side of it by the rounding of a sum taken in another order
EVERY_STEP = ["probes.histograms.every=10", "probes.norms.weight_every=1", "probes.norms.ratio_every=1"]


def metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    """metrics.csv as {step: {key: value}}, the empty cells left out."""
    rows: dict[int, dict[str, float]] = {}
    with (run_dir / "metrics.csv").open() as f:
        for row in csv.DictReader(f):
            values = {k: float(v) for k, v in row.items() if v not in ("", None) and k != "step"}
            rows.setdefault(int(row["step"]), {}).update(values)
    return rows


def mismatches(one: dict, sharded: dict, prefixes: tuple, rel: float, floor: float = 0.0) -> list:
    """(step, key, one process's value, sharded value) for every logged value under `prefixes` that the two runs
    do not share to `rel` relative (or `floor` absolute, for values near zero); a key only one run logs too."""
    wrong = []

    def close(x: float, y: float) -> bool:
        return math.isclose(x, y, rel_tol=rel, abs_tol=floor)

    for step in sorted(set(one) | set(sharded)):
        a, b = one.get(step, {}), sharded.get(step, {})
        for key in sorted(k for k in set(a) | set(b) if k.startswith(prefixes)):
            x, y = a.get(key), b.get(key)
            same = x is not None and y is not None and (math.isnan(x) and math.isnan(y) or close(x, y))
            if not same:
                wrong.append((step, key, x, y))
    return wrong


def step_gap(whole: dict, other: dict, initial: dict) -> tuple[float, float]:
    """(‖weights after one step taken whole − the same step split‖, ‖that step‖), over every tensor."""
    gap = torch.cat([(whole[k] - other[k]).flatten() for k in initial]).norm()
    step = torch.cat([(whole[k] - initial[k]).flatten() for k in initial]).norm()
    return float(gap), float(step)
