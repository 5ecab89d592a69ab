"""One Hydra job, whatever launched it: it runs the task the config names (training, mode=eval, the doctor),
records a verdict whatever happens, and exits with the verdict's code when it is the only job. In a sweep a job
records and goes on, or hands back the number a search optimizes."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from harness.errors import die

log = logging.getLogger(__name__)


def perform(cfg, checked: bool = False) -> dict:
    """The task `cfg` names, run in this process; its verdict. experiment=doctor: overfit runs of its own, then a
    diagnosis (harness.report.doctor); mode=eval: a checkpoint measured (harness.report.evaluate); else training
    (harness.train.run). `checked`: the door has validated the config (only its devices are checked here)."""
    from harness.train.run import open_job, run

    if cfg.get("doctor"):
        from harness.report.doctor import doctor

        return doctor(cfg, open_job(cfg, checked))
    if cfg.mode.name == "eval":
        from harness.report.evaluate import evaluate_job

        return evaluate_job(cfg, open_job(cfg, checked))
    return run(cfg, checked)


def task(cfg) -> dict | float | None:
    """One Hydra job, started by the command line (its door has validated the config). A single run exits with its
    verdict's code; a sweep job records and goes on, returning its verdict, or with `optimized_metric` set the
    number it names (what an optimizing sweeper reads). In a sweep stopped by a signal
    (harness.train.signals.MARKER), a job not started yet does not start."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.train.devices import global_rank
    from harness.train.run import exit_code
    from harness.train.signals import guard_worker, handled_here, mark_stopped, stopped

    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    out, sweep_dir = Path(HydraConfig.get().runtime.output_dir), Path(HydraConfig.get().sweep.dir)
    log_apart(global_rank())
    if sweeping:
        guard_worker()
        if stopped(sweep_dir) is not None:
            return not_started(out, stopped(sweep_dir))
    verdict = recorded(cfg, out, sweeping)
    if verdict is None:
        return None
    if not sweeping:
        # a DDP rank > 0 reports through rank 0: its own non-zero exit would make Lightning kill rank 0
        sys.exit(exit_code(verdict) if global_rank() == 0 else 0)
    if verdict["status"] == "INTERRUPTED" and handled_here():  # one job stopped by a signal stops the sweep
        mark_stopped(sweep_dir, verdict["signal"])
    if cfg.get("optimized_metric"):  # what a search (hydra/sweeper=optuna) optimizes; None: a failed trial
        from harness.report.search import metric_value

        return metric_value(verdict, cfg.optimized_metric, out)
    return verdict


def log_apart(rank: int, name: str = "train.log") -> None:
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


def recorded(cfg, out: Path, sweeping: bool) -> dict | None:
    """The job's verdict, whatever happens: a config mistake exits 2 (one line) or, in a sweep, is an ERROR verdict
    (None returned); a signal before the job's own handler is INTERRUPTED; a bug is an ERROR verdict, then raised
    (a sweep's other jobs go on)."""
    from harness.cli.door import RunDirTaken, check_run_dir
    from harness.errors import ConfigError
    from harness.report.verdict import Verdict
    from harness.train.devices import started_by_lightning
    from harness.train.signals import Interrupted

    try:
        if not started_by_lightning():  # a launcher's job too: its dir holds no earlier run
            check_run_dir(cfg, out)
        return perform(cfg, checked=True)
    except ConfigError as err:
        if not sweeping:
            die(str(err), err)
        log.error("error: %s", err)
        if not isinstance(err, RunDirTaken):  # that dir's verdict is an earlier run's: left as it is
            Verdict(status="ERROR", error=str(err)).write(out)
        return None
    except Interrupted as stop:  # before the job's own handler took over: a verdict all the same
        verdict = Verdict(status="INTERRUPTED", signal=stop.signum, steps=0, run_dir=str(out))
        verdict.write(out)
        return verdict.as_dict()
    except Exception as err:
        # a bug, not a config mistake: record it where the results would have been, then show it whole
        Verdict(status="ERROR", error=repr(err)).write(out)
        if not sweeping:
            raise
        log.exception("job failed: %s", err)  # the others go on; the summary marks this one
        return None


def not_started(out: Path, signum: int) -> None:
    """The verdict of a sweep job that a signal stopped before it began: INTERRUPTED at step 0, saying so."""
    import signal

    from harness.report.verdict import Verdict

    name = signal.Signals(signum).name
    log.warning("not started: the sweep was stopped by %s", name)
    Verdict(
        status="INTERRUPTED", signal=signum, steps=0, error=f"not started: the sweep was stopped by {name}"
    ).write(out)
