"""python -m harness.report SWEEP_DIR: rebuild a sweep's summary from its job dirs (harness.report.summary). A signal
ends it in one line, as train.py (harness.signals.run_guarded)."""

import sys

from harness.report.summary import main
from harness.signals import run_guarded

run_guarded(lambda: sys.exit(main(sys.argv[1:])))
