"""python -m harness.report DIR: harness.report.command, a signal ending it in one line."""

import sys

from harness.report.command import main
from harness.signals import run_guarded

run_guarded(lambda: sys.exit(main(sys.argv[1:])))
