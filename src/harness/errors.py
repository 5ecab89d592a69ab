"""Errors the user can fix. Each one reads as one line: the key or file, the bad value, and the fix."""

from __future__ import annotations

import os
import sys


class ConfigError(ValueError):
    """A bad config value or input file, found before any work is done. The command line exits 2 on it."""

    def __init__(self, key: str, value: object, fix: str):
        self.key, self.value, self.fix = key, value, fix
        super().__init__(f"{key}={value}: {' '.join(str(fix).split())}")  # one line, whatever the cause said


class PreflightFailed(Exception):
    """A preflight check run once training has begun (harness.checks.at_start.start_checks: after sharding, the precision in use,
    the ranks' data) failed, on every rank alike: no step is taken, and the verdict is PREFLIGHT_FAIL. Here, not
    beside the checks, so that the run can catch it without importing every check. `check`: the row's name."""

    def __init__(self, check: str, detail: str):
        self.check = check
        super().__init__(f"{check}: {detail}")


def die(message: str, err: BaseException | None = None) -> None:
    """End a command with `error: <message>` on stderr and exit 2; HARNESS_DEBUG=1 raises `err` instead, whole."""
    if err is not None and os.environ.get("HARNESS_DEBUG"):
        raise err
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)
