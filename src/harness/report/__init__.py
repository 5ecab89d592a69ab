"""The records a run and a sweep leave, and their one reader.

    verdict.py           verdict.json: the Verdict, its one reader (`verdict_in`) and the exit code of each status
    symptoms.py          the symptoms' record: names, places, suggestions, and how they judge a run
    summary.py           the sweep summary (summary.md, summary.csv, plots); `python -m harness.report <sweep dir>`
                         rebuilds it
    plots.py             the figures of a run and a sweep
    optimized_metric.py  the number a hyperparameter search optimizes, and the sweeper's rules

`harness.report.SweepSummary` is the Hydra callback conf/train.yaml names; it is imported when first asked for."""

from __future__ import annotations

from harness import exported

#: module -> the names it defines
EXPORTS = {"harness.report.summary": ("SweepSummary", "verdict_of")}

__getattr__ = exported(EXPORTS)
