"""One Hydra job, whatever launched it: the task its config names (training, mode=eval, the doctor), a verdict
recorded whatever happens, and the exit code of that verdict when it is the only job. In a sweep a job records and
goes on, or hands back the number a search optimizes."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from harness.errors import ConfigError, die
from harness.report.verdict import STOPPED, Verdict, exit_code, status_in
from harness.signals import Interrupted

log = logging.getLogger(__name__)


def task_of(cfg: DictConfig):
    """The task `cfg` names, a function (cfg, run dir) -> verdict: experiment=doctor, overfit runs of its own then
    a diagnosis (harness.tasks.doctor); mode=eval, a checkpoint measured (harness.tasks.evaluate); else training
    (harness.tasks.training)."""
    if cfg.get("doctor"):
        from harness.tasks.doctor import doctor

        return doctor
    if cfg.mode.name == "eval":
        from harness.tasks.evaluate import evaluate_job

        return evaluate_job
    from harness.tasks.training import train

    return train


def perform(cfg: DictConfig, checked: bool = False) -> dict:
    """The task `cfg` names, run in this process as a job runs it, for code of yours; its verdict. `checked`: the
    config is validated already (only its devices are checked here)."""
    from harness.tasks.training import open_job

    return task_of(cfg)(cfg, open_job(cfg, checked))


def job(cfg: DictConfig) -> dict | float | None:
    """One Hydra job, started by the command line (which has validated its config). A single run exits with its
    verdict's code; a sweep job records and goes on, returning its verdict, or with `optimized_metric` set the
    number it names (what an optimizing sweeper reads). In a sweep stopped by a signal (harness.signals.MARKER), a
    job not started yet does not start."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.ranks import global_rank, started_by_lightning
    from harness.signals import guard_worker, handled_here, mark_stopped, stopped
    from harness.tasks.training import open_job

    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    out, sweep_dir = Path(HydraConfig.get().runtime.output_dir), Path(HydraConfig.get().sweep.dir)
    _log_apart(global_rank())
    if sweeping:
        guard_worker()
        if stopped(sweep_dir) is not None:
            return _not_started(out, stopped(sweep_dir))
    with recorded(out, sweeping) as record:
        if not started_by_lightning():  # a launcher's job too: its dir holds no earlier run
            check_run_dir(cfg, out)
        record.verdict = task_of(cfg)(cfg, open_job(cfg, checked=True))
    verdict = record.verdict
    if verdict is None:
        return None
    if not sweeping:
        # a DDP rank > 0 reports through rank 0 (unless rank 0 was lost and this rank wrote the verdict)
        sys.exit(exit_code(verdict) if wrote(verdict) else 0)
    if verdict["status"] == "INTERRUPTED" and handled_here():  # one job stopped by a signal stops the sweep
        mark_stopped(sweep_dir, verdict["signal"])
    if cfg.get("optimized_metric"):  # what a search (hydra/sweeper=optuna) optimizes; None: a failed trial
        from harness.report.optimized_metric import metric_value

        return metric_value(verdict, cfg.optimized_metric, out)
    return verdict


@dataclass
class Record:
    """What `recorded` hands the job: the task's verdict, once it has one (None: a config mistake in a sweep)."""

    verdict: dict | None = None


@contextmanager
def recorded(out: Path, sweeping: bool):
    """Around a task: its verdict whatever happens. A config mistake exits 2 (one line) or, in a sweep, is an ERROR
    verdict (the record's verdict None); a signal before the task's own handler is INTERRUPTED; a bug is an ERROR
    verdict, then raised (a sweep's other jobs go on)."""
    record, paged = Record(), True
    try:
        yield record
    except ConfigError as err:
        paged = not isinstance(
            err, RunDirTaken
        )  # that dir's verdict and page are an earlier run's: left as they are
        if not sweeping:
            die(str(err), err)
        log.error("error: %s", err)
        if paged:
            Verdict(status="ERROR", error=str(err)).write(out)
    except Interrupted as stop:  # before the task's own handler took over: a verdict all the same
        verdict = Verdict(status="INTERRUPTED", signal=stop.signum, steps=0, run_dir=str(out))
        verdict.write(out)
        record.verdict = verdict.as_dict()
    except Exception as err:
        # a bug, not a config mistake: record it where the results would have been, then show it whole
        Verdict(status="ERROR", error=repr(err)).write(out)
        if not sweeping:
            raise
        log.exception("job failed: %s", err)  # the others go on; the summary marks this one
    finally:
        if paged:
            _page_of(out, writer=wrote(record.verdict))


def wrote(verdict: dict | None) -> bool:
    """Whether this process wrote the run's verdict: rank 0, or the rank that saw rank 0 lost (harness.train.distributed.watchdog)."""
    from harness.ranks import global_rank

    lost = (verdict or {}).get("lost") or {}
    return global_rank() == (lost.get("seen_by") if "seen_by" in lost else 0)


def _page_of(run_dir: Path, writer: bool) -> None:
    """report.html of a run that ended with a verdict, by the process that wrote it (rank 0, unless rank 0 was
    lost: the others share its dir or have none). A signal meanwhile is only noted: the exit code stands."""
    if writer and status_in(run_dir) is not None:
        from harness.report.run_page import page_or_warning

        page_or_warning(run_dir)


def _log_apart(rank: int, name: str = "train.log") -> None:
    """A rank > 0 that shares rank 0's run dir without a log file of its own (torchrun and SLURM start every rank
    as rank 0 is started; Lightning's launcher names its ranks' logs train_ddp_process_N.log) logs to
    train_rank_N.log: train.log stays rank 0's, its lines in order."""
    if rank == 0:
        return
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).name == name:
            own = logging.FileHandler(Path(handler.baseFilename).with_name(f"train_rank_{rank}.log"))
            own.setLevel(handler.level)
            own.setFormatter(handler.formatter)
            root.removeHandler(handler)
            handler.close()
            root.addHandler(own)


class RunDirTaken(ConfigError):
    """The run directory holds an earlier run's verdict: refused, and nothing is written there (a sweep job's
    ERROR verdict would itself overwrite the earlier one)."""


def check_run_dir(cfg: DictConfig, run_dir: Path, key: str = "hydra.run.dir") -> None:
    """Refuse a run directory that holds an earlier run's verdict: this run would overwrite its metrics,
    checkpoints and verdict. Allowed: `+overwrite=true`; the same run resumed (ckpt_path inside it); a job started
    again in the dir it stopped in (verdict INTERRUPTED, RANK_LOST, RANK_STALLED: a requeued SLURM job, torchrun's
    restart; in mode=full it continues from its own last.ckpt, harness.train.checkpoints.interrupted_here)."""
    status = status_in(Path(run_dir))
    if status in (None, *STOPPED) or cfg.get("overwrite", False) is True:
        return
    run_dir = Path(run_dir).absolute()
    ckpt = cfg.get("ckpt_path")
    if ckpt not in (None, "last") and run_dir in Path(ckpt).absolute().parents:
        return
    raise RunDirTaken(
        key,
        str(run_dir),
        f"already holds a run (verdict {status}) that this one would overwrite; choose another folder, "
        "or give +overwrite=true (a mode=full run continues inside it with "
        f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'})",
    )


def _not_started(out: Path, signum: int) -> None:
    """The verdict of a sweep job that a signal stopped before it began: INTERRUPTED at step 0, saying so."""
    import signal

    name = signal.Signals(signum).name
    log.warning("not started: the sweep was stopped by %s", name)
    Verdict(
        status="INTERRUPTED", signal=signum, steps=0, error=f"not started: the sweep was stopped by {name}"
    ).write(out)
