"""The Optuna sweeper a harness search runs under: the command line (harness.report.optimized_metric.search_class) puts it in
place of the hydra-optuna-sweeper plugin's own class, whose keys it keeps. The same search, except that one in which
no trial returned a number ends normally instead of raising Optuna's "No trials are completed yet", so the sweep
summary is still written and says how each trial ended (harness.report.summary.unreturned then names the cause in
one line). Here, not in harness: Hydra builds a sweeper only from the hydra_plugins package."""

from __future__ import annotations

import logging

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # the search extra is not installed: Hydra scans this package all the same, on every run
    OptunaSweeper = None

log = logging.getLogger(__name__)

#: Optuna's words when a study has no completed trial to call the best
NO_BEST = "No trials are completed yet"


if OptunaSweeper is not None:  # a search asked without the extra is refused at the door, in one line

    class OptunaSearch(OptunaSweeper):
        """OptunaSweeper that leaves the ending to the summary when no trial completed (see the module docstring)."""

        def sweep(self, arguments: list[str]) -> None:
            try:
                return super().sweep(arguments)
            except ValueError as err:
                if NO_BEST not in str(err):
                    raise
                log.warning("no trial returned a number: no best trial, no optimization_results.yaml")
                return None
