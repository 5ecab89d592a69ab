"""What the sweep tests share: a sweep's summary read back, its plots checked, and the span a job's log covers."""

from __future__ import annotations

import csv
import re
from datetime import datetime
from pathlib import Path

PNGS = ("grad_by_position.png", "reach.png", "loss.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def read_summary(sweep: Path) -> list[dict]:
    with open(sweep / "summary.csv", newline="") as f:
        return list(csv.DictReader(f))


def assert_plots(sweep: Path) -> None:
    for name in PNGS:
        path = sweep / name
        assert path.is_file() and path.read_bytes()[:8] == PNG_MAGIC, f"{path} is not a PNG"
        assert path.stat().st_size > 5000, f"{path} is nearly empty ({path.stat().st_size} bytes)"


def log_span(job_dir: Path) -> tuple[datetime, datetime]:
    """First and last timestamp of a job's train.log: when it ran."""
    stamps = re.findall(
        r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", (job_dir / "train.log").read_text(), re.M
    )
    first, last = (datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f") for s in (stamps[0], stamps[-1]))
    return first, last
