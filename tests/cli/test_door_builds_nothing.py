"""The door checks every job without building its parts: no model is built there that the run builds again, and a
value only a part's library refuses as it is built is one line naming the key from the run, exit 2."""

from __future__ import annotations

import json

import pytest

from tests.conftest import PROBES_OFF


@pytest.mark.slow  # a sweep of two train.py jobs: ~15 s
def test_the_door_builds_no_model_and_the_run_builds_it_where_it_trains(run_train, tmp_path, monkeypatch):
    """A fork's model that records each build: a sweep of two jobs builds none at the door, one each in the run."""
    builds = tmp_path / "builds.txt"
    monkeypatch.setenv("BUILDS_FILE", str(builds))
    result = run_train(
        "-m", "model=rnn", "model._target_=tests.forks.models.CountedGRU", "n=1,2", "mode.max_steps=3",
        "preflight=false", *PROBES_OFF, f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    where = builds.read_text().split()
    assert "door" not in where and where.count("run") >= 2, where


@pytest.mark.slow  # a train.py run that imports torch and Lightning at the door: ~4 s
def test_a_fork_model_taking_no_such_argument_is_refused_at_the_door_unbuilt(
    run_train, tmp_path, monkeypatch
):
    builds = tmp_path / "builds.txt"
    monkeypatch.setenv("BUILDS_FILE", str(builds))
    result = run_train("model=rnn", "model._target_=tests.forks.models.CountedGRU", "+model.dimension=3")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("error: model.dimension=3: tests.forks.models.CountedGRU takes no argument")
    assert not builds.exists() and not (tmp_path / "run").exists()


RUN_REFUSALS = [
    # (overrides, the start of the line): values only the library's own build refuses, named from the run
    ("+trainer.limit_val_batches=-1", "trainer.limit_val_batches=-1: Lightning refuses it"),
    ("+trainer.profiler=bogus", "trainer.profiler=bogus: Lightning refuses it"),
    ("model=rnn model._target_=examples.model.ConvLM +model.kernel=0", "model"),
]


@pytest.mark.slow  # each a train.py run that reaches the build: ~8 s
@pytest.mark.parametrize(("overrides", "line"), RUN_REFUSALS, ids=[o for o, _ in RUN_REFUSALS])
def test_a_value_a_library_refuses_as_the_run_builds_it_is_one_line_and_a_config_error(
    run_train, tmp_path, overrides, line
):
    result = run_train(*overrides.split(), "preflight=false", *PROBES_OFF)
    lines = [text for text in result.stderr.splitlines() if text.startswith("error: ")]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {line}"), (
        result.stderr[-3000:]
    )
    assert "Traceback" not in result.stdout + result.stderr
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "CONFIG_ERROR" and verdict["steps"] == 0, verdict
