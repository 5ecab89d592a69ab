"""The command line: Hydra for composition and sweeps, one-line errors and exit codes around it.

    __init__.py   `main`, train.py's and eval.py's entry
    overrides.py  the door: every job's config checked before anything runs
    prepare.py    `python -m harness.cli.prepare`: a dataset made ready

Exit codes: a verdict's, 2 for a config mistake, 128 + a signal. HARNESS_DEBUG=1 shows tracebacks."""

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
    """Send Lightning's log records to the root logger (the console and train.log), as every other library's."""
    # imported before Hydra sets up logging, Lightning gives its loggers a handler of their own and stops them
    # propagating; Hydra's job_logging then removes that handler and leaves propagation off: the lines went nowhere
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True


def main(config_dir: Path, mode: str | None = None) -> None:
    """The entry of train.py (and of eval.py, `mode="eval"`): every job's config checked, then Hydra runs each job
    (harness.tasks.job.job)."""
    import atexit
    import gc

    from harness.signals import guarded, raise_received
    from harness.train.perf.wall import command_clock

    # registered first, so it runs last: the objects left are frozen out of the last garbage collection, which
    # took about a second of every run's end walking torch's and Lightning's objects
    atexit.register(gc.freeze)
    with guarded(), command_clock():  # the process's start, for the run's wall time (perf.wall)
        import warnings

        import hydra

        from harness.cli.overrides import check_overrides, with_fixed_mode
        from harness.compat import import_lightning
        from harness.tasks.job import job

        if mode is not None:
            sys.argv[1:] = with_fixed_mode(sys.argv[1:], mode)
        # first: a typo costs a second, not the imports below; what it hands back (a dir it emptied) goes to Hydra
        sys.argv += check_overrides(sys.argv[1:], config_dir)
        import_lightning()  # before Hydra sets up logging, so conf/ sets its levels (the door may have already)
        raise_received()  # a signal the door's imports lost: the job does not start
        route_lightning_logs()
        for pattern in QUIET:
            warnings.filterwarnings("ignore", message=pattern)
        hydra.main(config_path=str(config_dir), config_name="train", version_base="1.3")(job)()
