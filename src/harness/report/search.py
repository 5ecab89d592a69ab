"""What a hyperparameter search optimizes: the number a finished job hands back to the sweeper.

`optimized_metric` (conf/train.yaml) names it: a number of verdict.json (`val_loss`, `final_loss`, `accuracy`, ...)
or a column of metrics.csv (`val/loss`: its last value). harness.cli.task returns it, so a sweeper that optimizes
(hydra/sweeper=optuna, conf/experiment/search.yaml) reads it from each job. A job that has no such number (it
stopped early, or the value is NaN) returns None, which Optuna records as a failed trial and goes on."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from harness.errors import ConfigError

#: the numbers of verdict.json a search can optimize (harness.report.verdict.Verdict)
VERDICT_NUMBERS = (
    "val_loss",
    "final_loss",
    "accuracy",
    "p_correct",
    "eval_loss",
    "eval_accuracy",
    "train_accuracy",
    "seconds",
    "steps",
)


def check_metric(name) -> None:
    """`optimized_metric` is null, a number of verdict.json, or a metrics.csv column (a name with a /)."""
    if name is None or name in VERDICT_NUMBERS or (isinstance(name, str) and "/" in name):
        return
    raise ConfigError(
        "optimized_metric",
        name,
        f"choose a number of verdict.json ({', '.join(VERDICT_NUMBERS)}) or a metrics.csv column such as "
        "val/loss (its last value)",
    )


def check_sweeper(cfg, sweeper, multirun: bool) -> None:
    """An optimizing sweeper (Optuna) gets a number from every job: `optimized_metric` must name one."""
    optimizes = "optuna" in str(sweeper.get("_target_", "")).lower()
    if multirun and optimizes and not cfg.get("optimized_metric"):
        raise ConfigError(
            "optimized_metric",
            None,
            "hydra/sweeper=optuna optimizes the number each job returns: name it, e.g. optimized_metric=val_loss "
            "(or use experiment=search, which does)",
        )


def metric_value(verdict: dict, name: str, run_dir: Path) -> float | None:
    """The finite number `name` stands for in this job's results, or None."""
    value = last_logged(run_dir / "metrics.csv", name) if "/" in name else verdict.get(name)
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def last_logged(path: Path, column: str) -> str | None:
    """The last non-empty value of `column` in metrics.csv, or None."""
    if not path.is_file():
        return None
    last = None
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get(column):
                last = row[column]
    return last
