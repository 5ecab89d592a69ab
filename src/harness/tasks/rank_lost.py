"""A training task on several processes that lost a rank (harness.train.distributed.watchdog): the watchdog the task gives
its Trainer, and the verdict the run ends with, written by the lowest rank still there, from the main thread or,
where that is stuck in a collective nothing will end, from the watchdog's."""

from __future__ import annotations

import logging
import shlex
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from harness.config.schema import Watchdog
from harness.report.verdict import exit_code
from harness.train.distributed.watchdog import Fault, RankWatch, in_log

log = logging.getLogger(__name__)


def watch_of(job, module) -> RankWatch:
    """The watchdog of a run on several processes (it does nothing on one): the run's settings, and how its thread
    ends the run when the main thread is stuck in a collective that nothing will end."""
    settings, defaults = job.cfg.get("watchdog") or {}, Watchdog()  # a fork's config may leave it out

    def on_fault(fault: Fault) -> int:
        job.interrupt.holding = True
        verdict = lost_verdict(job, job.watch.trainer, module, fault, from_thread=True)
        if job.watch.writes(fault):
            from harness.report.run_page import page_or_warning

            job.verdict.seconds = round(time.perf_counter() - job.started, 3)
            path = job.verdict.write(job.run_dir)
            log.error("%s: verdict %s", fault.line(), path)
            page_or_warning(job.run_dir)
        return exit_code(verdict)

    return RankWatch(
        job.run_dir,
        stall_s=float(settings.get("stall_s", defaults.stall_s)),
        beat_s=float(settings.get("beat_s", defaults.beat_s)),
        silent_s=float(settings.get("silent_s", defaults.silent_s)),
        on_fault=on_fault,
    )


def lost_verdict(job, trainer, module, fault: Fault, from_thread: bool = False) -> dict:
    """The verdict of a run a rank ended (RankLost): what it knew, the ranks named (`seen_by`: the rank that writes
    it, else None), where and how to resume (not after a rank's own error, which a resumed run meets again). The
    details (each rank's last frames) go to the log; the console has the fault's one line already. `from_thread`:
    the main thread is stuck, maybe behind a collective on the device: the last loss only where reading it does not
    wait for the device."""
    verdict = job.verdict
    verdict.status = fault.status
    verdict.lost = {**fault.as_dict(), "seen_by": fault.writer if job.watch.writes(fault) else None}
    verdict.steps = trainer.global_step if trainer is not None else verdict.steps
    loss = getattr(module, "last_loss", None)
    if not from_thread or loss is None or loss.device.type == "cpu":
        verdict.final_loss = module.final_loss()
    last = job.run_dir / "checkpoints" / "last.ckpt"
    if last.is_file() and fault.status != "ERROR":
        verdict.checkpoint = str(last)
        verdict.resume = _resume_command(last)
    verdict.error = fault.line()
    for named in fault.named:
        in_log(logging.INFO, f"rank {named.rank}: {named.what}; its last frames: {named.where or 'unknown'}")
    return verdict.as_dict()


def _resume_command(checkpoint: Path) -> str:
    """The command line of this run, resuming from `checkpoint` (torchrun: the same launch with this ckpt_path)."""
    task = HydraConfig.get().overrides.task if HydraConfig.initialized() else []  # run() from code of yours
    given = [o for o in task if not o.startswith("ckpt_path=")]
    return shlex.join(["python", "train.py", *given, f"ckpt_path={checkpoint}"])
