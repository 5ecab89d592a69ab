"""The probes' benchmark: its schedule gives each variant an equal share of every probe's periodic work from
whatever step it starts at, and its table shows a figure's spread (no timing asserted)."""

from __future__ import annotations

import pytest
from omegaconf import DictConfig, OmegaConf

from benchmarks import __main__ as bench_main

pytest.importorskip("harness.probes", reason="this project has no probes")
from benchmarks.probes import CHUNK, INNER, WATCH_INNER, schedule  # noqa: E402 -- it imports the probes
from harness.config.groups.probes import Probes  # noqa: E402

PERIODS = (1, 10, 20, 50, 100)


def steps_of(start: int, inner: int) -> dict[bool, list[int]]:
    """The global steps each side of a repetition starting at `start` runs (True: the variant measured)."""
    sides: dict[bool, list[int]] = {True: [], False: []}
    step = start
    for measured in schedule(inner):
        sides[measured] += range(step, step + CHUNK)
        step += CHUNK
    return sides


@pytest.mark.parametrize("start", [0, 3, 10, 37, 150, 1234])
def test_each_side_gets_an_equal_share_of_every_period_from_any_start(start):
    sides = steps_of(start, INNER)
    assert len(sides[True]) == len(sides[False]) == INNER
    for period in PERIODS:
        due = [sum(step % period == 0 for step in sides[side]) for side in (True, False)]
        assert due[0] == due[1] == INNER // period, (period, due)
    watch = steps_of(start, WATCH_INNER)  # wandb.watch logs every 10 steps
    assert (
        sum(s % 10 == 0 for s in watch[True]) == sum(s % 10 == 0 for s in watch[False]) == WATCH_INNER // 10
    )


def test_every_default_period_divides_a_repetition():
    """A probe whose period does not divide INNER would fall on one side more often than on the other (the
    continuations' generate_every runs in mode=full only: the benchmark measures overfit mode's set)."""
    probes = OmegaConf.structured(Probes)  # probes=default: its yaml keeps no value of its own
    periods = {
        f"{name}.{key}": value
        for name, entry in probes.items()
        if isinstance(entry, DictConfig)
        for key, value in entry.items()
        if key.endswith("every") and key != "generate_every"
        for value in ([value.overfit] if isinstance(value, DictConfig) else [value])  # given per mode
        if isinstance(value, int)
    }
    assert {"norms.every", "histograms.every", "datapoints.every", "activations.every"} <= set(periods)
    assert {key: p for key, p in periods.items() if INNER % p} == {}


def test_a_repetition_that_cannot_be_shared_evenly_is_refused():
    with pytest.raises(ValueError, match="not a multiple of 2 \\* CHUNK"):
        schedule(3 * CHUNK)  # an odd number of chunks a half: one side would get more of them


def test_the_table_shows_a_median_with_its_spread():
    assert bench_main.shown(1.031, (1.022, 1.04, 3)) == "1.031 (1.022–1.04, 3 repetitions)"
    assert bench_main.shown(0.5, None) == "0.5"
