"""A training run on several processes that lost a rank: `watch_of`, the watchdog the task gives its Trainer, and
`lost_verdict`, the verdict the lowest rank still there writes (from the watchdog's thread where the main thread
is stuck in a collective)."""

from __future__ import annotations

import logging
import shlex
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from harness.config.schema import Watchdog
from harness.report.verdict import exit_code
from harness.train.distributed.watchdog import Fault, RankWatch, log_to_file_only

log = logging.getLogger(__name__)


def watch_of(training, module) -> RankWatch:
    """The watchdog of `training` (harness.tasks.training.Training), ending the run when the main thread is stuck."""
    settings, defaults = training.cfg.get("watchdog") or {}, Watchdog()  # a fork's config may leave it out

    def on_fault(fault: Fault) -> int:
        training.interrupt.holding = True
        verdict = lost_verdict(training, training.watch.trainer, module, fault, from_thread=True)
        if training.watch.writes(fault):
            from harness.report.run_page import page_or_warning

            training.verdict.seconds = round(time.perf_counter() - training.started, 3)
            path = training.verdict.write(training.run_dir)
            log.error("%s: verdict %s", fault.line(), path)
            page_or_warning(training.run_dir)
        return exit_code(verdict)

    return RankWatch(
        training.run_dir,
        stall_s=float(settings.get("stall_s", defaults.stall_s)),
        beat_s=float(settings.get("beat_s", defaults.beat_s)),
        silent_s=float(settings.get("silent_s", defaults.silent_s)),
        on_fault=on_fault,
    )


def lost_verdict(training, trainer, module, fault: Fault, from_thread: bool = False) -> dict:
    """Fill the verdict of a run `fault` ended: the ranks named, where and how to resume (not after a rank's own
    error); each rank's last frames to the log. `from_thread`: called from the watchdog. Returns it as a dict."""
    verdict = training.verdict
    verdict.status = fault.status
    verdict.lost = {**fault.as_dict(), "seen_by": fault.writer if training.watch.writes(fault) else None}
    verdict.steps = trainer.global_step if trainer is not None else verdict.steps
    loss = getattr(module, "last_loss", None)
    if (
        not from_thread or loss is None or loss.device.type == "cpu"
    ):  # reading it must not wait for the device
        verdict.final_loss = module.final_loss()
    last = training.run_dir / "checkpoints" / "last.ckpt"
    if last.is_file() and fault.status != "ERROR":
        verdict.checkpoint = str(last)
        verdict.resume = _resume_command(last)
    verdict.error = fault.line()
    for named in fault.named:
        log_to_file_only(
            logging.INFO, f"rank {named.rank}: {named.what}; its last frames: {named.where or 'unknown'}"
        )
    return verdict.as_dict()


def _resume_command(checkpoint: Path) -> str:
    """This run's command line, resuming from `checkpoint`."""
    task = HydraConfig.get().overrides.task if HydraConfig.initialized() else []  # run() from code of yours
    given = [o for o in task if not o.startswith("ckpt_path=")]
    return shlex.join(["python", "train.py", *given, f"ckpt_path={checkpoint}"])
