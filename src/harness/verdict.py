"""verdict.json: the machine-readable result of a run (see docs/contracts.md, Run directory)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def _plain(value):
    """JSON-safe: NaN and inf become strings rather than invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def write_verdict(run_dir: Path, verdict: dict) -> Path:
    """Write `run_dir/verdict.json` atomically (a reader never sees half a file)."""
    path = Path(run_dir) / "verdict.json"
    staging = path.with_suffix(f".json.{os.getpid()}.tmp")
    staging.write_text(json.dumps(_plain(verdict), indent=2) + "\n")
    os.replace(staging, path)
    return path


def read_verdict(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "verdict.json").read_text())
