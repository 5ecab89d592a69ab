"""What a run and a sweep report: verdict.json (verdict.py), symptoms (symptoms.py: the record and its names),
the sweep summary (summary.py: summary.md, summary.csv, plots; `python -m harness.report <sweep dir>` rebuilds
it), the figures (plots.py), eval.json (evaluate.py: mode=eval, eval.py), the doctor's diagnosis (doctor.py) and
the number a hyperparameter search optimizes (search.py).

`harness.report.SweepSummary` is the Hydra callback conf/train.yaml names; it is imported when first asked for."""

from __future__ import annotations

from harness import exported

#: module -> the names it defines
EXPORTS = {"harness.report.summary": ("SweepSummary", "verdict_of")}

__getattr__ = exported(EXPORTS)
