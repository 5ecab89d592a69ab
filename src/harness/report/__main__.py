"""python -m harness.report DIR: rebuild a run's page or a sweep's summary and page (harness.report.command). A
signal ends it in one line, as train.py (harness.signals.run_guarded)."""

import sys

from harness.report.command import main
from harness.signals import run_guarded

run_guarded(lambda: sys.exit(main(sys.argv[1:])))
