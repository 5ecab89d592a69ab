"""The real train.py in a subprocess, stdin closed: verdicts, exit codes, one-line errors."""

from __future__ import annotations

import json
import re

import pytest

from harness.report.verdict import read_verdict
from tests.conftest import ROOT

VERDICT_KEYS = {
    "mode",
    "n",
    "model",
    "data",
    "length",
    "status",
    "final_loss",
    "floor",
    "steps",
    "seconds",
    "accuracy",
    "p_correct",
    "checks",
    "model_group",
    "eval_loss",
    "eval_accuracy",
    "train_accuracy",
    "eval_gap",
}
CHECKS = {
    "batch_format",
    "ids_in_range",
    "loss_mask",
    "data_roundtrip",
    "special_tokens",
    "split_overlap",
    "train_loader",
    "epoch_order",
    "val_order",
    "static_batches",
    "gradient_flow",
    "batch_independence",
    "causality",
    "document_isolation",
    "word_order",
    "init_loss",
    "determinism",
    "global_rng",
    "finite",
    "input_dependence",
    "residual",
    "attention_scale",
    "stable_log_probs",
    "twins",
    "precision",  # read as training starts, in the Trainer's precision (harness.checks.at_start.start_checks)
}


def test_overfit_two_examples_passes(run_train, tmp_path):
    result = run_train("mode=overfit", "n=2")
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "run"
    verdict = read_verdict(run_dir)
    assert set(verdict) >= VERDICT_KEYS
    assert verdict["status"] == "PASS" and verdict["mode"] == "overfit" and verdict["n"] == 2
    assert verdict["final_loss"] <= verdict["floor"] + 0.02 and verdict["accuracy"] == 1.0
    assert {c["name"] for c in verdict["checks"]} == CHECKS
    assert all(c["status"] == "PASS" for c in verdict["checks"]), verdict["checks"]
    assert (
        all(c["seconds"] >= 0 for c in verdict["checks"]) and sum(c["seconds"] for c in verdict["checks"]) > 0
    )
    assert (run_dir / ".hydra" / "config.yaml").exists() and (run_dir / "checkpoints" / "last.ckpt").exists()
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss", "train/acc", "train/p_correct", "val/loss"} <= set(header)
    assert "preflight" in result.stderr + result.stdout and "PASS" in result.stderr + result.stdout
    page = (run_dir / "report.html").read_text()  # the run's page: self-contained, every figure inline
    assert '<html lang="en" data-status="PASS"' in page and "reached the goal" in page
    assert (
        not re.search(r"""(src|href)=["'](?!data:|#)""", page) and page.count("data:image/png;base64,") >= 3
    )
    assert "<h3>step 0</h3>" in page and "python train.py" in page
    assert f"page: {run_dir / 'report.html'}" in (run_dir / "train.log").read_text()


@pytest.mark.slow  # a whole train.py run to its step budget
def test_budget_exhausted_fails_with_exit_1(run_train, tmp_path):
    result = run_train("n=5", "mode.max_steps=2", "preflight=false")
    assert result.returncode == 1, result.stderr[-3000:]
    verdict = read_verdict(tmp_path / "run")
    assert verdict["status"] == "FAIL" and verdict["steps"] == 2


@pytest.mark.slow
def test_preflight_failure_stops_before_training_with_exit_3(run_train, tmp_path):
    import os

    from tests.conftest import ROOT

    result = run_train(
        "model=rnn",
        "model._target_=tests.forks.models.PeekingGRU",
        env={"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )
    assert result.returncode == 3, result.stderr[-3000:]
    verdict = read_verdict(tmp_path / "run")
    causality = next(c for c in verdict["checks"] if c["name"] == "causality")
    assert verdict["status"] == "PREFLIGHT_FAIL" and causality["status"] == "FAIL"
    assert verdict["steps"] == 0 and not (tmp_path / "run" / "metrics.csv").exists()
    warned = run_train(
        "model=rnn",
        "model._target_=tests.forks.models.PeekingGRU",
        "preflight=warn",
        "n=1",
        "+overwrite=true",  # the same run dir as the refused run above
        env={"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )
    assert warned.returncode in (0, 1) and read_verdict(tmp_path / "run")["steps"] > 0


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("n=0", "n=0"),
        ("n=abc", "n=abc"),
        ("data.length=0", "data.length=0"),
        ("model=foo", "model=foo"),
        ("data.lenght=5", "data.lenght=5"),
        pytest.param("n=5000", "n=5000", marks=pytest.mark.slow),  # found once the data is read: ~8 s
    ],
)
def test_bad_value_exits_2_with_one_line(override, names, run_train, tmp_path):
    result = run_train(override)
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    run = tmp_path / "run"
    if override == "n=5000":  # found as the run reads its data: the run dir's verdict and page say so
        verdict = json.loads((run / "verdict.json").read_text())
        assert verdict["status"] == "CONFIG_ERROR" and f"error: {verdict['error']}" == lines[0], verdict
        assert (run / "report.html").is_file()
    else:  # refused at the door: no run dir at all
        assert not run.exists()


@pytest.mark.slow
def test_length_sweep_leaves_three_verdicts(run_train, tmp_path):
    result = run_train("-m", "data.length=10,50,200", "preflight=false")
    assert result.returncode == 0, result.stderr[-3000:]
    verdicts = sorted((tmp_path / "sweep").glob("*/verdict.json"))
    assert len(verdicts) == 3
    assert sorted(json.loads(v.read_text())["length"] for v in verdicts) == [10, 50, 200]


@pytest.mark.slow  # three train.py jobs in one sweep: ~13 s
def test_overfit_ladder(run_train, tmp_path):
    result = run_train("-m", "mode=overfit", "n=1,2,5", "preflight=false")
    assert result.returncode == 0, result.stderr[-3000:]
    verdicts = [json.loads(v.read_text()) for v in sorted((tmp_path / "sweep").glob("*/verdict.json"))]
    assert sorted(v["n"] for v in verdicts) == [1, 2, 5] and all(v["status"] == "PASS" for v in verdicts)
    # the guide's sample of this sweep's summary.md has the columns it writes, and the last line names its page
    header = next(
        line for line in (tmp_path / "sweep" / "summary.md").read_text().splitlines() if line[:1] == "|"
    )
    assert header in (ROOT / "docs" / "workflow.md").read_text(), header
    assert f"its page: {tmp_path / 'sweep' / 'report.html'}" in result.stdout + result.stderr
