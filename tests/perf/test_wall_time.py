"""A run's whole wall time accounted for (verdict.json perf.wall): a real mode=full run's phases, start-up to exit,
sum to the time its process took as the test measures it from outside, and its page and DONE line show them; the
clock's own rules: counted from the process's start only for the command's own run, the exit added by that run."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from harness.report.verdict import Verdict
from harness.train.perf import wall
from harness.train.perf.timeline import PHASES
from tests.conftest import train


@pytest.mark.slow  # ~10 s: a train.py run
def test_the_wall_split_sums_to_the_process_time_measured_from_outside(tmp_path, data_root):
    started = time.time()
    result = train(
        "mode=full",
        "mode.max_steps=40",
        "mode.val_every=20",
        "mode.ckpt_every=20",
        "probes=off",
        "mode.progress_bar=false",
        cwd=tmp_path,
        data_root=data_root,
    )
    outside = time.time() - started
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    perf = json.loads((run / "verdict.json").read_text())["perf"]
    split, total = perf["wall"]["seconds"], perf["wall"]["total"]
    assert perf["wall"]["until"] == "exit", perf["wall"]
    assert sum(split.values()) == pytest.approx(total, abs=0.01), perf["wall"]
    assert abs(total - outside) <= 0.05 * outside, (total, outside, split)
    ran = ("startup", "data", "model", "preflight", "trainer", "steps", "validation", "checkpoint", "page")
    assert all(split[phase] > 0 for phase in ran), split
    assert sum(perf["wall"]["share"].values()) == pytest.approx(1, abs=0.01), perf["wall"]
    # each phase's share of the training loop's whole time: validation and checkpoints ran, so they show
    shares = perf["time_share"]
    assert set(shares) == set(PHASES) and sum(shares.values()) == pytest.approx(1, abs=0.01), shares
    assert shares["validation"] > 0 and shares["checkpoint"] > 0, shares
    (done,) = [line for line in (result.stdout + result.stderr).splitlines() if "DONE:" in line]
    assert re.search(r"val loss \d\.\d{3}, [\d.]+ s in all \(start-up [\d.]+ s, ", done), done
    speed = (run / "report.html").read_text().split('<section id="speed">', 1)[1].split("</section>", 1)[0]
    assert "where the run&#x27;s" in speed and all(
        name in speed for name in ("start-up", "steps", "preflight")
    )


def _perf(started: float, ended: float) -> dict:
    """A perf item as the Speed leaves it: the loop's shares, its start and end."""
    shares = dict.fromkeys(PHASES, 0.0) | {"forward_backward": 0.5, "validation": 0.25, "setup": 0.25}
    return {"time_share": shares, "loop": {"started": started, "ended": ended}}


def _timed(clock: wall.RunClock, sleeps: dict[str, float]) -> dict:
    """Walk `clock` through a run: the data, the model, the preflight (`sleeps`' seconds each), a training loop; its
    perf item."""
    time.sleep(sleeps["data"])
    clock.enter("model")
    time.sleep(sleeps["model"])
    clock.enter("preflight")
    time.sleep(sleeps["preflight"])
    loop = time.time()
    time.sleep(sleeps["loop"])
    return _perf(loop, time.time())


def test_a_run_of_the_command_counts_from_the_process_start_and_adds_its_exit(tmp_path, monkeypatch):
    exits = []
    monkeypatch.setattr(wall.atexit, "register", lambda *args: exits.append(args))
    monkeypatch.setenv(
        wall.STARTED, f"{os.getpid()}:{time.time() - 2.0!r}"
    )  # cli.main's: this process, 2 s ago
    clock = wall.RunClock()
    verdict = Verdict(status="DONE", preflight_seconds=0.05, items={})
    verdict.items["perf"] = _timed(clock, {"data": 0.03, "model": 0.02, "preflight": 0.05, "loop": 0.2})
    clock.stamp(verdict, tmp_path)
    stamped = verdict.items["perf"]["wall"]
    split = stamped["seconds"]
    assert "loop" not in verdict.items["perf"] and stamped["until"] == "verdict", verdict.items
    assert split["startup"] == pytest.approx(2.0, abs=0.05) and stamped["total"] == pytest.approx(
        2.3, abs=0.1
    )
    assert sum(split.values()) == pytest.approx(stamped["total"], abs=0.005), stamped
    assert split["data"] == pytest.approx(0.03, abs=0.02) and split["model"] == pytest.approx(
        0.02, abs=0.02
    ), split
    assert split["validation"] == pytest.approx(0.05, abs=0.02), split  # the loop's share of it
    assert split["trainer"] == pytest.approx(0.05, abs=0.02), split  # the loop's set-up share
    path = verdict.write(tmp_path)
    ((handler, *args),) = exits
    ours = path.read_text()
    theirs = json.loads(ours)
    theirs["perf"]["wall"] = {**theirs["perf"]["wall"], "total": 9.0}  # a verdict another rank wrote
    path.write_text(json.dumps(theirs))
    handler(*args)
    assert json.loads(path.read_text()) == theirs  # not this clock's: left as it is
    path.write_text(ours)
    time.sleep(0.05)
    (tmp_path / "report.html").write_text("<html></html>")
    handler(*args)  # the process's exit
    final = json.loads(path.read_text())["perf"]["wall"]
    assert final["until"] == "exit" and final["seconds"]["page"] >= 0.04, final
    assert sum(final["seconds"].values()) == pytest.approx(final["total"], abs=0.005), final


def test_a_run_from_code_counts_from_the_tasks_start_and_leaves_the_exit(tmp_path, monkeypatch):
    exits = []
    monkeypatch.setattr(wall.atexit, "register", lambda *args: exits.append(args))
    monkeypatch.setenv(
        wall.STARTED, f"{os.getppid()}:{time.time() - 2.0!r}"
    )  # a parent's, inherited: not ours
    clock = wall.RunClock()
    verdict = Verdict(status="DONE", preflight_seconds=0.02, items={})
    verdict.items["perf"] = _timed(clock, {"data": 0.01, "model": 0.01, "preflight": 0.02, "loop": 0.04})
    clock.stamp(verdict, tmp_path)
    stamped = verdict.items["perf"]["wall"]
    assert "startup" not in stamped["seconds"] and stamped["total"] < 1 and exits == [], stamped


def test_the_process_start_is_read_from_the_system():
    began = wall.process_start()  # this test process began before its imports (torch's, Lightning's)
    assert time.time() - 3600 < began < time.time() - 0.5, time.time() - began
