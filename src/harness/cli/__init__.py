"""The command line: Hydra for composition and sweeps, one-line errors and exit codes around it.

    __init__.py         main: train.py's and eval.py's entry (a signal handler first, then the overrides
                        checked, then Hydra runs the job: harness.tasks.job)
    overrides.py        every job's config composed and validated, its folders checked, before anything runs
    prepare.py          `python -m harness.cli.prepare`: a dataset made ready without training

Exit codes: harness.report.verdict.EXIT_CODES (a verdict's status), 2 for a config or input mistake, 128 + the
signal when interrupted (130 SIGINT, 143 SIGTERM).
HARNESS_DEBUG=1 shows the full traceback of a config error instead of the one line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)


#: third-party warnings that say nothing about the user's run
QUIET = (
    r"Experiment logs directory .* exists and is not empty",  # the run dir already holds .hydra/
    r".*isinstance\(treespec, LeafSpec\)",
    r"The '\w+_dataloader' does not have many workers",  # tiny in-memory datasets need none
    r"`weights_only` was not set",
)


#: the loggers Lightning gives a handler of their own when imported before logging is set up
LIGHTNING_LOGGERS = ("pytorch_lightning", "lightning_fabric")


def route_lightning_logs() -> None:
    """Send Lightning's log records to the root logger, as every other library's. Imported before Hydra sets up
    logging, Lightning finds no root handler, so it gives its loggers a console handler of their own and stops
    them propagating; Hydra's job_logging then removes that handler (it names these loggers, to set their
    levels) and leaves propagation off: every Lightning line, at any level, went nowhere. Propagating, they
    reach the console and train.log, filtered by the levels conf/train.yaml gives them."""
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True


def main(config_dir: Path, mode: str | None = None) -> None:
    """Entry point of train.py (and of eval.py, `mode="eval"`: its task whatever the command line says of mode):
    every job's config validated (harness.cli.overrides), then Hydra runs the job (harness.tasks.job.job). A
    signal at any moment exits 128 + its number (harness.signals.guarded): the first handler is installed before
    anything else, and raises at once until a job's own handler (harness.train.interrupt.StopOnSignal) or a
    sweep's (harness.signals.SweepStop) takes over.

    At exit, after every exit handler registered once the run begins (the trackers' and loggers'), the objects
    left are frozen out of the interpreter's last garbage collection (gc.freeze): walking the millions of objects
    torch and Lightning make took about a second of every run's end. Whatever holds a file or a process still
    closes it, by reference count or by its own exit handler, as before."""
    import atexit
    import gc

    from harness.signals import guarded, raise_received

    atexit.register(gc.freeze)  # registered first, so it runs last
    with guarded():
        import warnings

        import hydra

        from harness.cli.overrides import check_overrides, fixed_mode
        from harness.compat import import_lightning
        from harness.tasks.job import job

        if mode is not None:
            sys.argv[1:] = fixed_mode(sys.argv[1:], mode)
        # first: a typo costs a second, not the imports below; what it hands back (a dir it emptied) goes to Hydra
        sys.argv += check_overrides(sys.argv[1:], config_dir)
        import_lightning()  # before Hydra sets up logging, so conf/ sets its levels (the door may have already)
        raise_received()  # a signal the door's imports lost: the job does not start
        route_lightning_logs()
        for pattern in QUIET:
            warnings.filterwarnings("ignore", message=pattern)
        hydra.main(config_path=str(config_dir), config_name="train", version_base="1.3")(job)()
