"""The number a hyperparameter search optimizes (`optimized_metric`: a verdict.json number or a metrics.csv
column's last value): its checks (`check_metric`, `check_sweeper`) and its value for a job (`metric_value`: None
where there is none, a trial Optuna records as failed)."""

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


#: the numbers of verdict.json each mode sets (mode=eval's verdict has val_loss alone)
MODE_NUMBERS = {
    "overfit": tuple(n for n in VERDICT_NUMBERS if n != "val_loss"),
    "full": ("val_loss", "final_loss", "accuracy", "p_correct", "seconds", "steps"),
    "eval": ("val_loss", "seconds"),
}
#: the metrics.csv columns the LightningModule logs, by prefix (harness.train.module): a name under one of these
#: prefixes is one of them; any other name with a / may be a probe's or a fork's own column
LOGGED = {"train/": ("loss", "acc", "p_correct"), "val/": ("loss", "acc", "p_correct")}
#: the class an Optuna sweep runs under (src/hydra_plugins/harness_search), in place of the plugin's own
SEARCH = "hydra_plugins.harness_search.OptunaSearch"


def check_metric(name, mode: str | None = None) -> None:
    """Refuse an `optimized_metric` that is not null, a verdict.json number `mode` sets, or a metrics.csv column
    (a name with a /; under train/ or val/, one the harness logs)."""
    if name is None:
        return
    numbers = MODE_NUMBERS.get(mode, VERDICT_NUMBERS)
    if name in numbers:
        return
    prefix = next((p for p in LOGGED if isinstance(name, str) and name.startswith(p)), None)
    if prefix is not None and name[len(prefix) :] in LOGGED[prefix]:
        return
    if isinstance(name, str) and "/" in name and prefix is None:
        return
    if prefix is not None:
        columns = ", ".join(prefix + c for c in LOGGED[prefix])
        fix = f"metrics.csv has no such column: the harness logs {columns} (any other name with a / is read as a probe's or your own column)"
    elif name in VERDICT_NUMBERS:
        fix = f"mode={mode} never sets it in verdict.json; choose one of {', '.join(numbers)}"
    else:
        fix = (
            f"choose a number of verdict.json ({', '.join(numbers)}) or a metrics.csv column such as "
            "val/loss (its last value)"
        )
    raise ConfigError("optimized_metric", name, fix)


def check_sweeper(cfg, sweeper, multirun: bool) -> None:
    """Refuse an optimizing sweeper (Optuna) without an `optimized_metric`."""
    if multirun and searches(sweeper) and not cfg.get("optimized_metric"):
        raise ConfigError(
            "optimized_metric",
            None,
            "hydra/sweeper=optuna optimizes the number each job returns: name it, e.g. optimized_metric=val_loss "
            "(or use experiment=search, which does)",
        )


def searches(sweeper) -> bool:
    """Whether the hydra.sweeper node optimizes a number (Optuna's, or harness's in its place)."""
    target = str(sweeper.get("_target_", ""))
    return "optuna" in target.lower() or target == SEARCH


def search_class(sweeper, multirun: bool) -> list[str]:
    """The override that runs an Optuna sweep under hydra_plugins.harness_search's class; [] otherwise."""
    target = str(sweeper.get("_target_", ""))
    return [f"hydra.sweeper._target_={SEARCH}"] if multirun and searches(sweeper) and target != SEARCH else []


def metric_value(verdict: dict, name: str, run_dir: Path) -> float | None:
    """The finite number `name` stands for in this job's results, or None."""
    value = _last_logged(run_dir / "metrics.csv", name) if "/" in name else verdict.get(name)
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _last_logged(path: Path, column: str) -> str | None:
    """The last non-empty value of `column` in metrics.csv, or None."""
    if not path.is_file():
        return None
    last = None
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get(column):
                last = row[column]
    return last
