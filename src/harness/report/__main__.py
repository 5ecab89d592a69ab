"""python -m harness.report SWEEP_DIR: rebuild a sweep's summary from its job dirs (harness.report.summary)."""

import sys

from harness.report.summary import main

sys.exit(main(sys.argv[1:]))
