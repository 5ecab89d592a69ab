"""One Hydra job, `job`: it runs the task its config names (`named_task`: train, evaluate or doctor), records a
verdict whatever happens and exits with its code (a sweep job returns it). `perform(cfg)` runs the named task from
code; `check_run_dir` guards a run dir. The path: cli.main -> job -> a task -> fit -> Trainer.fit."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError, die
from harness.report.verdict import STOPPED, Verdict, exit_code, status_in
from harness.signals import Interrupted

log = logging.getLogger(__name__)


def named_task(cfg: DictConfig):
    """The task `cfg` names, a function (cfg, run dir) -> verdict dict: the doctor (experiment=doctor), evaluation
    (mode=eval), else training."""
    if cfg.get("doctor"):
        from harness.tasks.doctor import doctor

        return doctor
    if cfg.mode.name == "eval":
        from harness.tasks.evaluate import evaluate_task

        return evaluate_task
    from harness.tasks.training import train

    return train


def perform(cfg: DictConfig, checked: bool = False) -> dict:
    """Run the task `cfg` names in this process, as a job does, and return its verdict. `checked`: the config is
    validated already (only its devices are checked here)."""
    from harness.tasks.training import open_job

    return named_task(cfg)(cfg, open_job(cfg, checked))


def job(cfg: DictConfig) -> dict | float | None:
    """One Hydra job. A single run exits with its verdict's code; a sweep job returns its verdict, or the
    `optimized_metric` number."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.ranks import global_rank, started_by_lightning
    from harness.signals import guard_worker, handled_here, mark_stopped, stop_signal
    from harness.tasks.training import open_job

    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    out, sweep_dir = Path(HydraConfig.get().runtime.output_dir), Path(HydraConfig.get().sweep.dir)
    _log_apart(global_rank())
    if sweeping:
        guard_worker()
        if stop_signal(sweep_dir) is not None:  # a signal stopped the sweep: this job does not start
            return _not_started(out, stop_signal(sweep_dir))
    with recorded(out, sweeping, cfg) as record:
        if not started_by_lightning():  # a launcher's job too: its dir holds no earlier run
            check_run_dir(cfg, out)
        record.verdict = named_task(cfg)(cfg, open_job(cfg, checked=True))
    verdict = record.verdict
    if verdict is None:
        return None
    if not sweeping:
        # a DDP rank > 0 reports through rank 0 (unless rank 0 was lost and this rank wrote the verdict)
        sys.exit(exit_code(verdict) if _wrote_verdict(verdict) else 0)
    if verdict["status"] == "INTERRUPTED" and handled_here():  # one job stopped by a signal stops the sweep
        mark_stopped(sweep_dir, verdict["signal"])
    if cfg.get("optimized_metric"):  # what a search (hydra/sweeper=optuna) optimizes; None: a failed trial
        from harness.report.optimized_metric import metric_value

        return metric_value(verdict, cfg.optimized_metric, out)
    return verdict


@dataclass
class Record:
    """What `recorded` hands the job: the task's verdict once it has one (None: a config mistake in a sweep)."""

    verdict: dict | None = None


@contextmanager
def recorded(out: Path, sweeping: bool, cfg: DictConfig | None = None):
    """Around a task: a verdict whatever happens. A config mistake is a CONFIG_ERROR verdict, then exits 2 (in a
    sweep: logged); a signal before the task's own handler is INTERRUPTED; a bug is an ERROR verdict, then raised (in
    a sweep: logged)."""
    from harness.ranks import global_rank

    record, paged = Record(), True
    try:
        yield record
    except ConfigError as err:
        # a run dir holding an earlier run's verdict (refused, or one this run resumes: a stopped run continues from
        # it once the mistake is fixed) is left as it is; else the error is this run's verdict and page
        paged = not isinstance(err, RunDirTaken) and status_in(out) in (None, "CONFIG_ERROR")
        if paged and global_rank() == 0:
            mode = OmegaConf.select(cfg, "mode.name", default=None) if cfg is not None else None
            Verdict(status="CONFIG_ERROR", mode=mode, steps=0, error=str(err), run_dir=str(out)).write(out)
            _write_page(out, writer=True)
        paged = False  # written now: a single run's exit below leaves no later moment
        if not sweeping:
            die(str(err), err)
        log.error("error: %s", err)
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
            _write_page(out, writer=_wrote_verdict(record.verdict))


def _wrote_verdict(verdict: dict | None) -> bool:
    """Whether this process wrote the run's verdict: rank 0, or the rank that saw rank 0 lost."""
    from harness.ranks import global_rank

    lost = (verdict or {}).get("lost") or {}
    return global_rank() == (lost.get("seen_by") if "seen_by" in lost else 0)


def _write_page(run_dir: Path, writer: bool) -> None:
    """Write report.html of a run that ended with a verdict, if this process (`writer`) wrote that verdict."""
    if writer and status_in(run_dir) is not None:
        from harness.report.run_page import page_or_warning

        page_or_warning(run_dir)


def _log_apart(rank: int, name: str = "train.log") -> None:
    """Move a rank > 0's log from rank 0's `name` to train_rank_N.log beside it, so train.log stays rank 0's."""
    # torchrun and SLURM start every rank as rank 0 is started; Lightning names its ranks' logs itself
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
    """The run dir holds an earlier run's verdict: refused, and nothing is written there (not even a CONFIG_ERROR
    verdict)."""


def check_run_dir(cfg: DictConfig, run_dir: Path, key: str = "hydra.run.dir") -> None:
    """Raise RunDirTaken for a run dir holding an earlier run's verdict, unless `+overwrite=true`, the run resumes
    from a checkpoint inside it, that run stopped part-way (STOPPED: a requeued or restarted job) or it never began
    (CONFIG_ERROR: the same command again, its mistake fixed)."""
    status = status_in(Path(run_dir))
    if status in (None, "CONFIG_ERROR", *STOPPED) or cfg.get("overwrite", False) is True:
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
    """Write the INTERRUPTED verdict of a sweep job that a signal stopped before it began."""
    import signal

    name = signal.Signals(signum).name
    log.warning("not started: the sweep was stopped by %s", name)
    Verdict(
        status="INTERRUPTED", signal=signum, steps=0, error=f"not started: the sweep was stopped by {name}"
    ).write(out)
