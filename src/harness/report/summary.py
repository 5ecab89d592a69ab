"""A sweep's summary, one row a job read back from the job dirs (`collect`), written as summary.csv, summary.md,
plots and page (`write_summary`); `SweepSummary`, the Hydra callback that writes it when a multirun ends. A job
without a verdict is MISSING."""

# a job's identity comes from .hydra/ (a job that failed still has its model and length), its outcome from
# verdict.json, its loss curve from metrics.csv

from __future__ import annotations

import csv
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.report.run_files import read_metrics, select, yaml_in
from harness.report.speed_section import mfu_of
from harness.report.verdict import Verdict, verdict_in

log = logging.getLogger(__name__)

#: the columns every summary has, in order (the README's tables), then the ones that tell jobs apart
COLUMNS = (
    "model",
    "length",
    "rule",
    "status",
    "final_loss",
    "accuracy",
    "steps",
    "reach_init",
    "reach_final",
)
#: then, where any job has them: the speed's medians (verdict.json perf: tokens a second, model FLOPs utilization)
EXTRA = (
    "model_group",
    "mode",
    "n",
    "data",
    "seed",
    "val_loss",
    "symptoms",
    "seconds",
    "tokens_per_s",
    "mfu",
    "job",
    "error",
)
#: the metrics.csv columns of the loss curves (Lightning's CSVLogger, see HarnessModule)
LOSS, VAL_LOSS = "train/loss", "val/loss"
PLOTS = ("grad_by_position.png", "reach.png", "loss.png")
REACH = (
    "reach = ‖∂L/∂e_0‖ / ‖∂L/∂e_(T-2)‖, the gradient of the loss at the first position's input relative to the "
    "second-to-last's; 0 = underflow to exactly zero in float32; an empty cell = not recorded."
)


@dataclass
class Job:
    """One job dir read back: its summary row, input-gradient norms by position, loss curves."""

    row: dict
    grads: dict[str, list[float]] = field(default_factory=dict)  # "init" / "final" -> norm per position
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, training loss)
    val_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)


def _as_float(value) -> float | None:
    """A verdict value as a float ("nan" and "inf" as written in verdict.json too), else None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def verdict_of(job_dir: Path) -> tuple[Verdict, str]:
    """The job's Verdict and "", or an empty Verdict and why there is none to read."""
    values, why = verdict_in(job_dir)
    if values is None:
        why = why or (
            f"no verdict.json: the job has not finished, or stopped before writing one (see {job_dir.name}/train.log)"
        )
        return Verdict(), why
    return Verdict.from_dict(values), ""


def _read_job(job_dir: Path) -> Job:
    """One job dir read back."""
    (cfg, bad_cfg), (hydra, bad_hydra) = (
        yaml_in(job_dir / ".hydra/config.yaml"),
        yaml_in(job_dir / ".hydra/hydra.yaml"),
    )
    verdict, unread = verdict_of(job_dir)
    unread = "; ".join(why for why in (unread, bad_cfg, bad_hydra) if why)
    mode = select(cfg, "mode.name") or verdict.mode
    n = (select(cfg, "n") or verdict.n) if mode == "overfit" else None  # n means nothing in full mode
    perf = verdict.items.get("perf") if isinstance(verdict.items.get("perf"), dict) else {}
    row = {
        # the model's class (a sweep over model.arch tells its rows apart), else its config's _target_
        "model": verdict.model or str(select(cfg, "model._target_") or "").rpartition(".")[2] or None,
        "model_group": select(hydra, "hydra.runtime.choices.model") or verdict.model_group,
        "length": select(cfg, "data.length") or verdict.length,
        "rule": select(cfg, "data.rule") or verdict.rule,
        "status": verdict.status or "MISSING",
        "final_loss": _as_float(verdict.final_loss),
        "accuracy": _as_float(verdict.accuracy),
        "steps": verdict.steps,
        "reach_init": _as_float(verdict.items.get("reach_init")),
        "reach_final": _as_float(verdict.items.get("reach_final")),
        "mode": mode,
        "n": n,
        "data": select(hydra, "hydra.runtime.choices.data") or verdict.data,
        "seed": select(cfg, "seed") if cfg is not None else verdict.seed,
        "val_loss": _as_float(verdict.val_loss),
        # the names of what the run showed while it trained (verdict.json symptoms), one each
        "symptoms": " ".join(sorted({s["name"] for s in verdict.items.get("symptoms") or []})) or None,
        "seconds": _as_float(verdict.seconds),
        "tokens_per_s": _as_float(perf.get("tokens_per_s")),
        "mfu": mfu_of(perf),  # none above 1: a peak measured low
        "job": job_dir.name,
        "error": "; ".join(why for why in (verdict.error, unread) if why) or None,
    }
    grads = verdict.items.get("grad_by_position") or {}
    grads = {k: [_as_float(x) for x in v] for k, v in grads.items() if isinstance(v, list)}
    curves = read_metrics(job_dir / "metrics.csv", lambda name: name in (LOSS, VAL_LOSS)).curves
    return Job(row=row, grads=grads, curve=curves.get(LOSS, []), val_curve=curves.get(VAL_LOSS, []))


def _job_order(job_dir: Path) -> tuple:
    return (0, int(job_dir.name), "") if job_dir.name.isdigit() else (1, 0, job_dir.name)


def _collect_dirs(sweep_dir: Path) -> list[Path]:
    """Every job dir of `sweep_dir` (a subdir holding `.hydra/` or `verdict.json`), in job order."""
    return sorted(
        (
            d
            for d in Path(sweep_dir).iterdir()
            if d.is_dir()
            and not d.name.startswith(".")
            and ((d / ".hydra").is_dir() or (d / "verdict.json").is_file())
        ),
        key=_job_order,
    )


def collect(sweep_dir: Path) -> list[Job]:
    """Every job dir of `sweep_dir` read, grouped by model, then sorted by length and n (ties in job order)."""
    jobs = [_read_job(d) for d in _collect_dirs(sweep_dir)]
    first = {}  # models in the order the sweep ran them (its own order: rnn, lstm, transformer), not by name
    for i, job in enumerate(jobs):
        first.setdefault(str(job.row["model"]), i)
    return sorted(jobs, key=lambda j: (first[str(j.row["model"])], j.row["length"] or 0, j.row["n"] or 0))


def _cell(key: str, value, markdown: bool) -> str:
    """One table cell: empty when unknown, an exact 0 as 0 (an underflow, not a rounding)."""
    if value is None:
        return ""
    if isinstance(value, float):
        if value == 0:
            return "0"
        if not math.isfinite(value):
            return str(value)
        if not markdown:
            return format(value, ".6g")
        return format(value, {"accuracy": ".2f", "seconds": ".1f", "tokens_per_s": ".0f"}.get(key, ".3g"))
    text = str(value)
    if markdown:  # one line, no column breaks, short enough to read in a table
        text = text.replace("|", "\\|").replace("\n", " ")
        text = text if len(text) <= 160 else text[:157] + "..."
    return text


def write_csv(jobs: list[Job], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS + EXTRA)
        for job in jobs:
            writer.writerow([_cell(k, job.row[k], markdown=False) for k in COLUMNS + EXTRA])
    return path


def _shown_columns(jobs: list[Job]) -> tuple[list[str], list[str]]:
    """The columns a table shows (the CSV's, less empty extra ones and those every job shares), and the shared
    values as key=value."""
    shared, columns = [], list(COLUMNS)
    for key in EXTRA:
        values = {str(job.row[key]) for job in jobs if job.row[key] not in (None, "")}
        if (
            key in ("model_group", "mode", "n", "data", "seed")
            and len(values) == 1
            and all(job.row[key] is not None for job in jobs)
        ):
            shared.append(f"{key}={values.pop()}")
        elif values:
            columns.append(key)
    return columns, shared


def headline(jobs: list[Job], shared: list[str]) -> str:
    """The status line: how many jobs ended how, and what every job shares."""
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.row["status"]] = counts.get(job.row["status"], 0) + 1
    tally = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    return (
        f"{len(jobs)} jobs: {tally or 'none'}" + (f"; every job: {', '.join(shared)}" if shared else "") + "."
    )


def markdown(jobs: list[Job], title: str) -> str:
    """summary.md's text: the status line, the table and the plots."""
    columns, shared = _shown_columns(jobs)
    lines = [
        f"# Sweep summary: {title}",
        "",
        headline(jobs, shared),
        REACH,
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    lines += ["| " + " | ".join(_cell(k, job.row[k], markdown=True) for k in columns) + " |" for job in jobs]
    lines += ["", *(f"![{name[:-4]}]({name})" for name in PLOTS)]
    return "\n".join(lines) + "\n"


def write_summary(sweep_dir: Path, jobs: list[Job] | None = None, plots: bool = True) -> dict[str, Path]:
    """Write summary.csv, summary.md, the plots (unless `plots` is False) and report.html of `jobs` (default: every
    job dir) into `sweep_dir`; returns the paths by kind."""
    sweep_dir = Path(sweep_dir)
    jobs = collect(sweep_dir) if jobs is None else jobs
    written = {"csv": write_csv(jobs, sweep_dir / "summary.csv")}
    md = sweep_dir / "summary.md"
    md.write_text(markdown(jobs, sweep_dir.name))
    written["md"] = md
    if plots:
        from harness.report import plots as draw  # matplotlib is imported there, only now

        written["grad_by_position"] = draw.grad_by_position(jobs, sweep_dir / "grad_by_position.png")
        written["reach"] = draw.reach_by_length(jobs, sweep_dir / "reach.png")
        written["loss"] = draw.loss_curves(jobs, sweep_dir / "loss.png")
    from harness.report.sweep_page import write_sweep_page

    columns, shared = _shown_columns(jobs)
    written["html"] = write_sweep_page(sweep_dir, jobs, columns, f"{headline(jobs, shared)} {REACH}", PLOTS)
    return written


class SweepSummary(Callback):
    """Hydra callback (conf/train.yaml): every multirun's summary in its sweep dir; a signal stops the sweep as a
    whole (harness.signals.SweepStop)."""

    def __init__(self):
        self.stop = None

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from harness.signals import SweepStop

        if str(config.hydra.launcher.get("_target_", "")).endswith("SlurmLauncher"):
            return  # the jobs are a cluster's: they go on without the process that submitted them
        self.stop = SweepStop(Path(config.hydra.sweep.dir))
        self.stop.install()

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from harness.signals import Interrupted, stop_signal

        sweep_dir = Path(config.hydra.sweep.dir)
        if self.stop is not None:
            self.stop.restore()
        if sweep_dir.is_dir():
            self.summarize(sweep_dir)
        else:  # no job got as far as making its dir: nothing to summarize
            log.warning("no sweep dir %s: no summary written", sweep_dir)
        signum = stop_signal(sweep_dir)
        if signum is not None:
            log.warning("sweep stopped by a signal: the summary covers the jobs that finished")
            raise Interrupted(signum)
        _exit_if_nothing_returned(config, sweep_dir)

    def summarize(self, sweep_dir: Path) -> None:
        jobs = collect(sweep_dir)
        written = write_summary(sweep_dir, jobs)
        failed = [job.row["job"] for job in jobs if job.row["status"] not in ("PASS", "DONE")]
        log.info(
            "sweep summary of %d jobs%s: %s; its page: %s",
            len(jobs),
            f" ({len(failed)} not PASS/DONE: jobs {', '.join(failed)})" if failed else "",
            written["md"],
            written["html"],
        )


def _exit_if_nothing_returned(config: DictConfig, sweep_dir: Path) -> None:
    """End a search none of whose jobs returned a number for optimized_metric in one line: exit 2 when every job
    ran (the name is at fault), 1 when they failed."""
    from harness.report.optimized_metric import metric_value, searches

    name = config.get("optimized_metric")
    if not name or not searches(config.hydra.sweeper) or not sweep_dir.is_dir():
        return
    jobs = _collect_dirs(sweep_dir)
    if any(metric_value(verdict_of(d)[0].as_dict(), name, d) is not None for d in jobs):
        return
    statuses = [verdict_of(d)[0].status or "MISSING" for d in jobs]
    ran = all(status in ("PASS", "FAIL", "DONE", "SYMPTOM") for status in statuses)
    why = f"no trial returned it ({len(jobs)} trials: {', '.join(sorted(set(statuses)))}); see {sweep_dir / 'summary.md'}"
    fix = "; name a number each job has, e.g. optimized_metric=val_loss" if ran else ""
    print(f"error: optimized_metric={name}: {why}{fix}", file=sys.stderr)
    sys.exit(2 if ran else 1)
