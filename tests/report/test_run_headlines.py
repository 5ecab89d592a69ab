"""What a run's last console line and its page's headline say of its time and its validation: the DONE and PASS
lines give the process's whole wall time by phase (perf.wall), the validation loss to 4 significant figures, and
a run that ended before its first validation says so in both."""

from __future__ import annotations

from harness.report.run_page import sentence
from harness.report.speed_section import wall_phrase
from harness.report.verdict import Verdict
from harness.train.full_run import Full

#: perf.wall of a run that took 6.1 s, as the training task stamps it
WALL = {
    "seconds": {
        "startup": 3.8,
        "data": 0.2,
        "model": 0.1,
        "preflight": 0.4,
        "trainer": 0.2,
        "steps": 1.35,
        "end": 0.01,
    },
    "total": 6.06,
    "until": "verdict",
}


def _done(**values) -> Verdict:
    return Verdict(status="DONE", mode="full", steps=60, seconds=1.9, final_loss=1.25, **values)


def test_the_done_line_rounds_the_validation_loss_and_gives_the_whole_wall_time():
    line = Full(None).summary(_done(val_loss=1.4388058185577393, items={"perf": {"wall": WALL}}))
    assert line.startswith(
        "DONE: 60 steps, val loss 1.439, 6.1 s in all (start-up 3.8 s, data 0.2 s, model 0.1 s, "
    ), line
    assert "steps 1.4 s)" in line and "end of fit" not in line, line  # a phase under 0.05 s left out


def test_a_run_shorter_than_val_every_says_no_validation_ran():
    line = Full(None).summary(_done(val_loss=None))
    assert line == "DONE: 60 steps, no validation ran, 1.9 s", line  # no perf: the task's own seconds
    headline = sentence({**_done(val_loss=None).as_dict(), "model": "GPT", "data": "text"}, goal=None)
    assert headline == "GPT trained 60 steps, 1.9 s on text: final loss 1.25, no validation ran.", headline
    measured = sentence(
        {**_done(val_loss=1.5).as_dict(), "model": "GPT", "data": "text", "perf": {"wall": WALL}}, None
    )
    assert "60 steps, 6.06 s on text" in measured and measured.endswith("validation loss 1.5."), measured


def test_the_wall_phrase_without_a_wall_is_the_seconds():
    assert wall_phrase(None, 2.31) == "2.3 s" and wall_phrase({"wall": {"seconds": {}}}, 3.0) == "3.0 s"
