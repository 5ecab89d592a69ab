"""Errors the user can fix. Each one reads as one line: the key or file, the bad value, and the fix."""

from __future__ import annotations

import os
import sys


class ConfigError(ValueError):
    """A bad config value or input file, found before any work; the command line exits 2 on it."""

    def __init__(self, key: str, value: object, fix: str):
        self.key, self.value, self.fix = key, value, fix
        super().__init__(f"{key}={value}: {' '.join(str(fix).split())}")  # one line, whatever the cause said


# here, not beside the checks: the run catches it without importing every check
class PreflightFailed(Exception):
    """A check run as training starts (harness.checks.at_start) failed on every rank: no step is taken, the verdict
    is PREFLIGHT_FAIL. `check`: the row's name."""

    def __init__(self, check: str, detail: str):
        self.check = check
        super().__init__(f"{check}: {detail}")


def die(message: str, err: BaseException | None = None) -> None:
    """End a command with `error: <message>` on stderr and exit 2; HARNESS_DEBUG=1 raises `err` instead, whole."""
    if err is not None and os.environ.get("HARNESS_DEBUG"):
        raise err
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)
