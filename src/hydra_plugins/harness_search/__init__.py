"""`OptunaSearch`, the sweeper a harness search runs under in place of the Optuna plugin's (same keys): a search in
which no trial returned a number ends normally, so the summary is written and names the cause in one line."""

# here, not in harness: Hydra builds a sweeper only from the hydra_plugins package

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
        """OptunaSweeper that leaves the ending to the summary when no trial completed."""

        def sweep(self, arguments: list[str]) -> None:
            try:
                return super().sweep(arguments)
            except ValueError as err:
                if NO_BEST not in str(err):
                    raise
                log.warning("no trial returned a number: no best trial, no optimization_results.yaml")
                return None
