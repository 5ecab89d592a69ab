"""A rank slower than the others outside collectives, named with its rank, host and phase (`straggler`,
harness.train.perf.straggler): the rule on given timings, then two real processes with rank 1 loading slowly."""

from __future__ import annotations

import json
import time

import pytest

from harness.data import SyntheticDataModule
from harness.ranks import global_rank
from harness.train.perf.straggler import OWN, PHASES, behind, persistent
from tests.conftest import PROBES_OFF, train
from tests.train.conftest import FORK

# --- the rule, on given timings (seconds a step, by rank and phase) -----------------------------------------------


def reading(**ranks: dict) -> dict[int, dict[str, float]]:
    """{rank: {phase: seconds}}: each rank's given phases over a healthy step's (ms)."""
    healthy = {"data loading": 1e-3, "forward": 5e-3, "backward": 5e-3, "the optimizer step": 3e-3}
    return {int(r.removeprefix("r")): {**healthy, **given} for r, given in ranks.items()}


#: rank 1 loads 40 ms a step more; rank 0 waits for it in the forward's collective (as two real processes showed)
SLOW_DATA = reading(r0={"forward": 45e-3}, r1={"data loading": 41e-3})


def test_a_rank_slow_to_load_is_named_with_the_phase_it_loses_the_time_in():
    found = persistent([SLOW_DATA] * 3, min_s=0.01, fraction=0.2, patience=3)
    assert found is not None and (found.rank, found.phase) == (1, "data loading"), found
    assert found.excess == pytest.approx(0.040) and found.others == pytest.approx(1e-3), found


def test_the_waiting_in_a_collective_is_not_counted_as_a_ranks_own_time():
    # rank 0's forward holds the wait: it is no phase of OWN, so rank 0 is never the one named
    assert "forward" not in OWN and "backward" not in OWN and set(OWN) < set(PHASES)
    assert behind(SLOW_DATA, 0.01, 0.2).rank == 1


def test_among_four_ranks_the_one_slow_in_its_optimizer_step_is_named():
    four = reading(r0={}, r1={}, r2={"the optimizer step": 30e-3}, r3={"data loading": 2e-3})
    found = persistent([four] * 3, 0.01, 0.2, 3)
    assert (found.rank, found.phase) == (2, "the optimizer step"), found


@pytest.mark.parametrize(
    "readings, why",
    [
        ([SLOW_DATA] * 2, "fewer readings than the patience"),
        ([SLOW_DATA, reading(r0={}, r1={}), SLOW_DATA], "one reading in the window is even"),
        (
            [SLOW_DATA, reading(r0={"data loading": 41e-3}, r1={"forward": 45e-3}), SLOW_DATA],
            "not the same rank every time",
        ),
        ([reading(r0={"data loading": 4e-3}, r1={})] * 3, "rank 0 logging: 3 ms, under min_s"),
        (
            [reading(r0={"forward": 1.0}, r1={"data loading": 0.03})] * 3,
            "30 ms of a 1 s step: under the fraction",
        ),
        ([{0: SLOW_DATA[0]}] * 3, "one rank"),
    ],
)
def test_no_straggler_without_a_persistent_gap_past_both_thresholds(readings, why):
    assert persistent(readings, min_s=0.01, fraction=0.2, patience=3) is None, why


# --- two real processes ------------------------------------------------------------------------------------------

#: what rank 1 sleeps per example read; a batch of 8: 40 ms a step, several times the step's own ~12 ms on 2 cores
DELAY_MS, BATCH = 5.0, 8


class _Sleepy:
    """A dataset reading each example `seconds` late."""

    def __init__(self, base, seconds: float):
        self.base, self.seconds = base, seconds

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i):
        time.sleep(self.seconds)
        return self.base[i]

    def __getattr__(self, name):  # record(i) and the rest, as the base has them
        return getattr(self.base, name)


class SlowRankOne(SyntheticDataModule):
    """The synthetic data, its training examples read `delay_ms` late on global rank 1 alone."""

    def __init__(self, *args, delay_ms: float = DELAY_MS, **kwargs):
        super().__init__(*args, **kwargs)
        self.delay_s = delay_ms / 1000

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if global_rank() == 1 and not isinstance(self.train_dataset, _Sleepy):
            self.train_dataset = _Sleepy(self.train_dataset, self.delay_s)


#: 60 steps of mode=full: readings of 10 steps from step 10 on (the first is warm-up), patience 3 judged twice over
RUN = ["mode=full", "mode.max_steps=60", "mode.val_every=1000", f"data.batch_size={BATCH}", "preflight=false"]


def _ddp_run(tmp_path, data_root, *args):
    result = train(*RUN, *args, cwd=tmp_path, data_root=data_root, env=FORK)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "run"
    assert (run_dir / "train_ddp_process_1.log").is_file(), "rank 1 never started: not a run of two processes"
    paces = [json.loads((run_dir / ".ranks" / f"{r}.pace.json").read_text()) for r in (0, 1)]
    assert all(len(p["readings"]) >= 3 for p in paces), paces  # rank 0 had a whole window to judge
    verdict = json.loads((run_dir / "verdict.json").read_text())
    return [s for s in verdict["symptoms"] if s["name"] == "straggler"], paces


@pytest.mark.slow  # ~10 s: two DDP processes, 60 steps
def test_a_rank_loading_its_data_slowly_is_named_with_its_host_and_phase(tmp_path, data_root):
    found, paces = _ddp_run(
        tmp_path,
        data_root,
        "trainer=ddp",
        "data._target_=tests.scale.test_straggler.SlowRankOne",
        *PROBES_OFF,
    )
    assert len(found) == 1, found
    (straggler,) = found
    assert straggler["where"] == f"rank 1 ({paces[1]['host']})", straggler
    assert "in data loading" in straggler["detail"] and straggler["value"] > 0.5 * DELAY_MS * BATCH, straggler


@pytest.mark.slow  # ~10 s a run: two processes, 60 steps, the cheap probes on (rank 0 alone logs them)
@pytest.mark.parametrize("trainer", ["ddp", "fsdp"])
def test_ranks_doing_the_same_work_raise_no_straggler(trainer, tmp_path, data_root):
    found, _ = _ddp_run(tmp_path, data_root, f"trainer={trainer}")
    assert found == [], found
