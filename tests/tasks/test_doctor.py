"""The doctor: its diagnosis from the runs' verdicts, the overrides it passes on, and real doctor runs through
train.py (a broken model, a broken harness)."""

from __future__ import annotations

import json

import pytest

from harness.tasks.doctor import Rung, diagnose, substitute_overrides

PASS = {"status": "PASS", "steps": 20, "final_loss": 0.01, "symptoms": []}


def rung(label: str, n: int, status: str = "PASS", **verdict) -> Rung:
    return Rung(label, n, ["train.py"], {**PASS, "status": status, **verdict})


def ladder(label: str, *statuses: str, **verdict) -> list[Rung]:
    return [rung(label, n, s, **verdict) for n, s in zip((1, 2, 5), statuses, strict=False)]


def test_every_rung_passing_is_healthy():
    diagnosis, evidence = diagnose(
        ladder("model", "PASS", "PASS", "PASS") + ladder("rnn", *["PASS"] * 3), "rnn"
    )
    assert diagnosis == "healthy" and evidence[0] == "model n=1: PASS (20 steps, final loss 0.01)", evidence


def test_the_substitute_failing_too_points_at_the_harness_or_the_data():
    rungs = ladder("model", "PASS", "FAIL", "FAIL") + ladder("rnn", "PASS", "FAIL", "FAIL")
    diagnosis, evidence = diagnose(rungs, "rnn")
    assert diagnosis == "harness or data broken" and "substitute (rnn) fails n=2 too" in evidence[-1]


def test_the_substitute_failing_where_the_model_passes_is_no_fault_of_the_model():
    diagnosis, evidence = diagnose(
        ladder("model", *["PASS"] * 3) + ladder("rnn", "PASS", "PASS", "FAIL"), "rnn"
    )
    assert diagnosis == "healthy" and "fails where the model does not" in evidence[-1]
    # the substitute memorizes n=1 where the model cannot: the model, not the pipeline
    rungs = ladder("model", "FAIL", "FAIL", "FAIL") + ladder("rnn", "PASS", "FAIL", "FAIL")
    assert diagnose(rungs, "rnn")[0] == "model broken"


def test_only_the_model_failing_is_the_model_with_its_preflight_rows_and_symptoms():
    checks = [
        {"name": "gradient_flow", "status": "PASS", "detail": "all fine"},
        {"name": "causality", "status": "FAIL", "detail": "position 3 sees position 4"},
    ]
    symptom = {"name": "dead_units", "where": "net.1", "detail": "100.0% of its outputs exactly zero"}
    broken = [
        rung("model", 1, "PREFLIGHT_FAIL", checks=checks, symptoms=[symptom]),
        *ladder("model", "-", "FAIL")[1:],
    ]
    diagnosis, evidence = diagnose(broken + ladder("rnn", "PASS", "PASS", "PASS"), "rnn")
    assert diagnosis == "model broken"
    assert "preflight causality: FAIL position 3 sees position 4" in evidence
    assert "symptom dead_units in net.1: 100.0% of its outputs exactly zero" in evidence
    assert not [e for e in evidence if "gradient_flow" in e]


def test_loop_twins_passing_where_the_vectorized_model_fails_is_a_vectorization_bug():
    rungs = ladder("model", "FAIL", "FAIL", "FAIL") + ladder("rnn", *["PASS"] * 3) + [rung("model_loops", 1)]
    diagnosis, evidence = diagnose(rungs, "rnn")
    assert diagnosis == "vectorization broken" and "loop twins" in evidence[-1]


def test_memorizing_one_but_not_five_is_capacity_or_optimization_and_the_symptoms_say_which():
    spike = {"name": "loss_spike", "where": "train/loss", "detail": "jumped"}
    rungs = (
        ladder("model", "PASS", "PASS")
        + [rung("model", 5, "FAIL", symptoms=[spike])]
        + ladder("rnn", *["PASS"] * 3)
    )
    diagnosis, evidence = diagnose(rungs, "rnn")
    assert diagnosis == "capacity or optimization"
    assert evidence[-1].startswith("optimization: loss_spike: the learning rate is too high"), evidence
    rungs[2] = rung("model", 5, "FAIL")
    assert diagnose(rungs, "rnn")[1][-1].startswith("capacity: no symptom at n=5")


def test_the_substitute_gets_the_data_and_trainer_overrides_but_not_the_models_own():
    given = [
        "model=gpt",
        "model.size=small",
        "+model.extra=1",
        "data=text",
        "data.length=16",
        "optim.lr=1e-3",
    ]
    given += ["schedule=cosine", "trainer.gradient_clip_val=1.0", "seed=3"]
    kept = ["data=text", "data.length=16", "trainer.gradient_clip_val=1.0", "seed=3", "model=lstm"]
    assert substitute_overrides(given, "lstm") == kept


@pytest.mark.slow  # ~40 s: four train.py runs inside the doctor's own
def test_a_doctor_run_names_a_broken_model_and_the_commands_it_ran(run_train, tmp_path):
    result = run_train(
        "experiment=doctor",
        "model=rnn",
        "model._target_=tests.forks.models.PeekingGRU",
        "doctor.substitute=lstm",
        "doctor.ladder=[1,2]",
        "data.length=8",
        "probes.plots=false",
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "doctor.json").read_text())
    assert report["diagnosis"] == "model broken", report
    assert any(e.startswith("preflight causality: FAIL") for e in report["evidence"]), report["evidence"]
    runs = {(r["who"], r["n"]): r for r in report["runs"]}
    assert set(runs) == {("model", 1), ("model", 2), ("lstm", 1), ("lstm", 2), ("model_loops", 1)}
    assert runs[("lstm", 2)]["status"] == "PASS" and runs[("model", 1)]["status"] == "PREFLIGHT_FAIL"
    assert "model.vectorize=false" in runs[("model_loops", 1)]["command"]
    assert "model=lstm" in runs[("lstm", 1)]["command"] and "PeekingGRU" not in runs[("lstm", 1)]["command"]
    for r in report["runs"]:  # each command ran, into its own folder, and left its verdict there
        assert (
            json.loads((tmp_path / "run" / f"{r['who']}_n{r['n']}" / "verdict.json").read_text())["status"]
            == r["status"]
        )
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "FAIL" and verdict["diagnosis"] == "model broken"
    assert "doctor: MODEL BROKEN" in result.stdout


@pytest.mark.slow  # ~30 s: three short train.py runs inside the doctor's own
def test_a_doctor_run_blames_the_harness_when_the_substitute_fails_too(run_train, tmp_path):
    result = run_train(
        "experiment=doctor",
        "doctor.ladder=[1]",
        "doctor.loop_twins=false",
        "mode.max_steps=2",  # no model memorizes anything in two steps
        "data.length=8",
        "probes.plots=false",
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "doctor.json").read_text())
    assert report["diagnosis"] == "harness or data broken", report
    assert [(r["who"], r["status"]) for r in report["runs"]] == [("model", "FAIL"), ("rnn", "FAIL")]
