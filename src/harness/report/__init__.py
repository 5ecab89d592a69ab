"""The records a run and a sweep leave, and their one reader.

    verdict.py           verdict.json: the Verdict, its one reader (`verdict_in`) and the exit code of each status
    symptoms.py          the symptoms' record: names, places, suggestions, and how they judge a run
    summary.py           the sweep summary (summary.md, summary.csv, plots)
    plots.py             the figures of a run and a sweep
    run_page.py          a run's page, report.html: the verdict, the preflight, symptoms, curves, datapoints, config
    sweep_page.py        a sweep's page, report.html: the summary table linked to each job's page, the plots
    run_files.py         a run dir's files read back, whatever is damaged: .hydra/ YAML, metrics.csv, the defaults
    html.py              the pages' pieces: one self-contained file, its tables, style and script
    charts.py            the pages' charts, without matplotlib: lines as inline SVG, heat maps as an inline PNG
    command.py           `python -m harness.report <run dir | sweep dir>` rebuilds a run's page or a sweep's summary
    optimized_metric.py  the number a hyperparameter search optimizes, and the sweeper's rules

`harness.report.SweepSummary` is the Hydra callback conf/train.yaml names; it is imported when first asked for."""

from __future__ import annotations

from harness import exported

#: module -> the names it defines
EXPORTS = {"harness.report.summary": ("SweepSummary", "verdict_of")}

__getattr__ = exported(EXPORTS)
