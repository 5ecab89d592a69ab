"""The data_wait symptom: planted, a loader whose every example takes 3 ms to read (tests/perf/slow_data.py) makes
the steps wait on it, with the probes off; healthy runs (the default one, a GPT on text in mode=full compiled with
aot_eager) wait on theirs far less, and never raise it, judged over windows as short as the planted run's."""

from __future__ import annotations

import csv
import json

import pytest

from harness.report.symptoms import SUGGESTIONS
from tests.conftest import train
from tests.train.conftest import FORK

#: short windows, so that a run of 30 steps is judged twice past its warm-up (mode=full logs every 10 steps)
JUDGED = ("perf.window=10", "perf.warmup=5")


def _symptoms(run) -> list[dict]:
    return json.loads((run / "verdict.json").read_text())["symptoms"]


@pytest.mark.slow  # ~10 s: a train.py run whose 30 steps wait ~0.1 s each on the loader
def test_a_slow_loader_is_named_with_its_fixes(tmp_path, data_root):
    result = train(
        "mode=full",
        "data._target_=tests.perf.slow_data.SlowSynthetic",
        "+data.sleep_s=0.003",  # 32 examples a batch: ~0.1 s a step in __getitem__
        "mode.max_steps=30",
        "preflight=false",  # its data checks read every training example
        "probes=off",  # the speed's symptoms need no probes
        "mode.progress_bar=false",
        *JUDGED,
        cwd=tmp_path,
        data_root=data_root,
        env=FORK,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    found = [s for s in _symptoms(run) if s["name"] == "data_wait"]
    assert len(found) == 1, _symptoms(run)
    symptom = found[0]
    assert symptom["where"] == "train_dataloader" and symptom["value"] >= 0.6 and symptom["step"] == 19, (
        symptom
    )
    assert symptom["suggestion"] == SUGGESTIONS["data_wait"]
    assert all(
        fix in symptom["suggestion"] for fix in ("data.num_workers", "pin_memory", "harness.cli.prepare")
    )
    assert "symptom data_wait in train_dataloader at step 19" in result.stdout + result.stderr  # the console
    perf = json.loads((run / "verdict.json").read_text())["perf"]
    assert perf["time_share"]["data_wait"] >= 0.6, perf
    with open(run / "metrics.csv", newline="") as f:
        assert any(r.get("symptoms/data_wait") for r in csv.DictReader(f))
    table = (run / "report.html").read_text().split('id="symptom-table"', 1)[1].split("</table>", 1)[0]
    assert "data_wait" in table and "data.num_workers" in table


@pytest.mark.slow  # ~10 s each: a train.py run
@pytest.mark.parametrize(
    "overrides",
    [
        (),  # python train.py: overfit 2 synthetic examples, every probe on
        ("model=gpt", "data=text", "mode=full", "mode.max_steps=30", "mode.progress_bar=false"),
        ("mode=full", "mode.max_steps=30", "compile=aot_eager", "mode.progress_bar=false"),
    ],
    ids=["default", "gpt-text-full", "aot_eager"],
)
def test_a_healthy_loader_is_no_symptom(overrides, tmp_path, data_root):
    result = train(*overrides, *JUDGED, cwd=tmp_path, data_root=data_root)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    assert not [s for s in _symptoms(run) if s["name"] == "data_wait"], _symptoms(run)
    perf = json.loads((run / "verdict.json").read_text())["perf"]
    # judged: windows past the warm-up covered at least perf.window steps, and the loader's share stayed low
    assert perf["warmup_steps"] == 5 and perf["log_steps"] >= (10 if not overrides else 2), perf
    assert perf["time_share"]["data_wait"] < 0.15, perf
