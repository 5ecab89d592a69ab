"""The records a run and a sweep leave, and their readers.

    verdict.py           verdict.json, its reader, the exit codes
    symptoms.py          the Symptom record and the SYMPTOM rule
    summary.py           the sweep summary; SweepSummary
    plots.py             the sweep's figures
    run_page.py          a run's report.html
    speed_section.py     its Speed section: the speed figures, where a step's time goes
    sweep_page.py        a sweep's report.html
    run_files.py         a run dir's files read back
    html.py              the pages' pieces
    charts.py            the pages' charts: SVG, and a PNG by Pillow
    optimized_metric.py  the number a search optimizes

`SweepSummary` is imported when first asked for."""

from __future__ import annotations

from harness import exported

#: module -> the names it defines
EXPORTS = {"harness.report.summary": ("SweepSummary", "verdict_of")}

__getattr__ = exported(EXPORTS)
