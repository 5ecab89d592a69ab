"""A sweep's summary: a real sweep with a failed job marked and the others kept, rebuilt from the job dirs by
`report`, a job that died without a verdict or cannot be read; the summary's cost to import, and the one reader
of verdict.json."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report.__main__ import main as report_main
from harness.report.summary import COLUMNS, EXTRA, collect, write_summary
from harness.report.verdict import read_verdict
from tests.conftest import ROOT, needs_probes, train
from tests.sweeps.conftest import PNG_MAGIC, PNGS, assert_plots, read_summary

# --- a real sweep and its summary ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory, data_root) -> Path:
    """A real basic-launcher sweep of two jobs, the second a user mistake only found inside the job (more examples
    to overfit than its data holds: the door, which builds no data, cannot see it)."""
    cwd = tmp_path_factory.mktemp("failing_sweep")
    result = train(
        "-m",
        "n=1,5000",
        "data.rule=first_token",
        "data.length=12",
        "mode.max_steps=3",
        "preflight=false",
        cwd=cwd,
        data_root=data_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd / "sweep"


@pytest.mark.slow  # its sweep (failing_sweep): two train.py jobs, ~12 s
@needs_probes
def test_failed_job_is_marked_and_the_others_kept(failing_sweep):
    rows = read_summary(failing_sweep)
    assert list(rows[0])[: len(COLUMNS)] == list(COLUMNS) and {"n", "job", "error"} <= set(rows[0])
    good, bad = sorted(rows, key=lambda r: r["job"])
    assert (good["model"], good["length"], good["rule"], good["steps"]) == (
        "Transformer",
        "12",
        "first_token",
        "3",
    )
    assert good["status"] in ("PASS", "FAIL") and float(good["final_loss"]) > 0 and good["error"] == ""
    verdict = read_verdict(failing_sweep / good["job"])
    assert float(good["reach_init"]) == pytest.approx(verdict["reach_init"], rel=1e-5), (
        "the probe's reach, read back"
    )
    assert (bad["status"], bad["model"], bad["length"], bad["rule"], bad["n"]) == (
        "CONFIG_ERROR",
        "Transformer",
        "12",
        "first_token",
        "5000",
    )
    assert bad["error"].startswith("n=5000: the training split has only") and bad["final_loss"] == ""
    md = (failing_sweep / "summary.md").read_text()
    assert (
        "| model | length | rule | status | final_loss | accuracy | steps | reach_init | reach_final |" in md
    )
    assert "| CONFIG_ERROR |" in md and "n=5000" in md and "1 CONFIG_ERROR" in md
    assert_plots(failing_sweep)


@pytest.mark.slow  # reads failing_sweep's dirs
@needs_probes
def test_report_rebuilds_the_summary_from_the_job_dirs(failing_sweep, tmp_path, capsys):
    """python -m harness.report SWEEP_DIR (its main(), in-process: the start-up of another Python costs seconds)."""
    before = (failing_sweep / "summary.csv").read_text()
    for name in ("summary.csv", "summary.md", *PNGS):
        (failing_sweep / name).unlink()
    assert report_main([str(failing_sweep)]) == 0
    assert (failing_sweep / "summary.csv").read_text() == before
    assert "| CONFIG_ERROR |" in capsys.readouterr().out
    assert_plots(failing_sweep)
    for bad in (tmp_path / "nope", tmp_path):  # no such dir; a dir without job dirs
        assert report_main([str(bad)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {bad}:"), lines


@pytest.mark.slow  # reads failing_sweep's dirs
def test_summary_of_a_job_that_died_without_a_verdict(failing_sweep, tmp_path):
    """A job killed before writing verdict.json (OOM, a cluster timeout) is still a row: MISSING, with its model."""
    import shutil

    sweep = tmp_path / "sweep"
    shutil.copytree(failing_sweep, sweep)
    (sweep / "0" / "verdict.json").unlink()
    rows = {job.row["job"]: job.row for job in collect(sweep)}
    assert (
        rows["0"]["status"] == "MISSING" and rows["0"]["model"] == "Transformer" and rows["0"]["length"] == 12
    )
    assert "no verdict.json" in rows["0"]["error"] and rows["1"]["status"] == "CONFIG_ERROR"
    write_summary(sweep, plots=False)
    assert "| MISSING |" in (sweep / "summary.md").read_text()


def test_underflow_is_written_as_zero_and_drawn(tmp_path):
    """reach 0.0 (an underflow) is the finding: written 0, not left empty, and drawn on the axis floor."""
    from harness.report.plots import reach_by_length
    from harness.report.summary import Job, write_csv

    def job(length: int, reach_init: float | None) -> Job:
        row = dict.fromkeys(COLUMNS + EXTRA)
        row.update(model="rnn", length=length, status="DONE", reach_init=reach_init, job=str(length))
        return Job(row=row)

    jobs = [job(10, 1.5e-3), job(50, 1.6e-17), job(200, 0.0), job(400, None)]
    rows = list(csv.DictReader(write_csv(jobs, tmp_path / "summary.csv").open()))
    assert [r["reach_init"] for r in rows] == ["0.0015", "1.6e-17", "0", ""]
    with_zero, without = (
        reach_by_length(jobs, tmp_path / "zero.png"),
        reach_by_length(jobs[:2], tmp_path / "no.png"),
    )
    assert with_zero.read_bytes()[:8] == PNG_MAGIC
    assert with_zero.read_bytes() != without.read_bytes(), "the zero should be drawn, not dropped"


def test_summary_is_importable_without_matplotlib_or_torch_cost():
    """Hydra instantiates the callback for every run (single runs too): importing it must stay cheap."""
    code = "import sys, harness.report.summary; print(sorted(m for m in ('matplotlib', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


UNREADABLE_JOBS = {
    "a_list": ("verdict.json", "[1, 2]", "not a verdict (holds a JSON list, not an object)"),
    "status_a_number": ("verdict.json", '{"status": 5}', "not a verdict (status is int '5', not str)"),
    "steps_a_string": ("verdict.json", '{"status": "DONE", "steps": "many"}', "not a verdict (steps is str"),
    "symptoms_not_a_list": ("verdict.json", '{"status": "DONE", "symptoms": "x"}', "symptoms is str"),
    "symptom_without_name": (
        "verdict.json",
        '{"status": "DONE", "symptoms": [{}]}',
        "symptoms must be a list",
    ),
    "grads_not_lists": (
        "verdict.json",
        '{"status": "DONE", "grad_by_position": {"init": 3}}',
        "grad_by_position",
    ),
    "config_damaged": (".hydra/config.yaml", "mode: {name: [full", "config.yaml: not readable YAML"),
    "config_a_list": (".hydra/config.yaml", "- 1\n- 2\n", "config.yaml: holds a YAML list"),
    "hydra_damaged": (".hydra/hydra.yaml", "hydra: [", "hydra.yaml: not readable YAML"),
}


def test_report_marks_a_job_it_cannot_read_and_summarizes_the_rest(tmp_path):
    """python -m harness.report on a sweep whose job dirs hold a verdict.json of the wrong shape or a damaged
    .hydra/ file: each such job is one row saying why, as invalid JSON was; it crashed instead."""
    sweep = tmp_path / "sweep"
    good = '{"status": "DONE", "mode": "full", "final_loss": 1.5, "steps": 3}'
    names = ["good", *UNREADABLE_JOBS]
    for job, name in enumerate(names):
        (sweep / str(job) / ".hydra").mkdir(parents=True)
        (sweep / str(job) / "verdict.json").write_text(good)
        (sweep / str(job) / ".hydra" / "config.yaml").write_text("mode: {name: full}\nseed: 0\n")
        if name in UNREADABLE_JOBS:
            file, text, _ = UNREADABLE_JOBS[name]
            (sweep / str(job) / file).write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "harness.report", str(sweep)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    with open(sweep / "summary.csv") as f:
        rows = {names[int(r["job"])]: r for r in csv.DictReader(f)}
    assert set(rows) == set(names) and rows["good"]["status"] == "DONE" and not rows["good"]["error"]
    for name, (_, _, said) in UNREADABLE_JOBS.items():
        assert said in rows[name]["error"], (name, rows[name])
    assert rows["config_damaged"]["status"] == "DONE", "the verdict is read: only the config is not"


def test_verdict_json_has_one_reader_that_keeps_a_status_its_other_fields_cannot_spoil(tmp_path):
    """harness.report.verdict reads verdict.json for every part: the summary gets why a file is no verdict, the
    run-dir check and resuming get the status, which a probe's field of another shape does not hide."""
    from harness.report.verdict import status_in, verdict_in

    cases = {
        "none": (None, None, ""),
        "damaged": ("{", None, "not valid JSON"),
        "odd_field": (
            '{"status": "INTERRUPTED", "steps": "many"}',
            "INTERRUPTED",
            "not a verdict (steps is str",
        ),
        "a_list": ("[1]", "?", "holds a JSON list"),
        "whole": ('{"status": "PASS", "steps": 3}', "PASS", ""),
    }
    for name, (text, status, why) in cases.items():
        (tmp_path / name).mkdir()
        if text is not None:
            (tmp_path / name / "verdict.json").write_text(text)
        values, reason = verdict_in(tmp_path / name)
        assert status_in(tmp_path / name) == (status if text != "{" else "?"), name
        assert why in reason and (values is not None) == (name == "whole"), (name, values, reason)
