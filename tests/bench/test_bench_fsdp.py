"""The sharding benchmark clocks the watchdog by wrapping its parts by name: each name it wraps must exist."""

from __future__ import annotations

from benchmarks.fsdp import WATCHDOG_PARTS
from harness.train.distributed.watchdog import RankWatch


def test_every_watchdog_part_the_benchmark_clocks_is_a_method_of_the_watchdog():
    missing = [part for part in WATCHDOG_PARTS if not callable(getattr(RankWatch, part, None))]
    assert not missing, f"benchmarks/fsdp.py clocks RankWatch.{missing}, which it no longer has"
