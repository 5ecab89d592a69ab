"""The speed figures of real runs: each logging step's perf/ row agrees with the batches the run took and the FLOPs
it counted, the time split adds up to the step, verdict.json's `perf` holds their medians, the report draws them,
the sweep summary lists them; a run of several ranks counts every rank's tokens."""

from __future__ import annotations

import csv
import json
import math
import random

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError
from torch.utils.data import DataLoader

from harness.config.declare import check_declared
from harness.config.groups.trainer import Perf
from harness.data.dataset import CharDataset
from harness.data.tokenizer import CharTokenizer
from harness.errors import ConfigError
from harness.models import Transformer
from harness.report.run_page import write_run_page
from harness.report.summary import collect
from harness.train.loggers import MetricsCSV
from harness.train.module import HarnessModule
from harness.train.nonfinite import NonFiniteGuard
from harness.train.perf.readout import Readout
from harness.train.perf.speed import FIGURES, Speed, speed_callbacks, speed_of
from harness.train.perf.timeline import PHASES
from tests.conftest import train

BATCH, LENGTH = 4, 16  # a step's examples and positions a batch; one label a example in the loss (classify)


def _perf_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in r.items() if v} for r in csv.DictReader(f) if r.get("perf/step_s")]


def _close(a: float, b: float, rel: float = 1e-4) -> bool:
    return math.isclose(a, b, rel_tol=rel)


def _classify_data(size: int = 64) -> DataLoader:
    rng, tokenizer = random.Random(0), CharTokenizer("abcdefgh01")
    records = [{"text": "".join(rng.choice("abcdefgh") for _ in range(LENGTH)), "label": rng.choice("01")}]
    records = records * size
    return DataLoader(CharDataset(records, tokenizer, "classify", LENGTH), batch_size=BATCH, shuffle=True)


def bare_trainer(tmp_path, callbacks: list, max_steps: int, **arguments) -> pl.Trainer:
    """A Trainer with `callbacks`, logging every 2 steps to tmp_path's metrics.csv, nothing else on."""
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        log_every_n_steps=2,
        callbacks=callbacks,
        logger=MetricsCSV(tmp_path, name="", version="", flush_logs_every_n_steps=1),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        **arguments,
    )


@pytest.mark.parametrize("accumulate", [1, 2])
def test_each_logging_step_reports_what_its_steps_did(tmp_path, one_thread, accumulate):
    torch.manual_seed(0)
    module = HarnessModule(Transformer(10, d_model=16, layers=1, heads=2, max_len=LENGTH))
    speed, guard = Speed(warmup=2, window=4, peak_cache=str(tmp_path / "peaks.json")), NonFiniteGuard()
    trainer = bare_trainer(
        tmp_path, [speed, guard, Readout()], max_steps=12, accumulate_grad_batches=accumulate
    )
    trainer.fit(module, train_dataloaders=_classify_data())
    perf = speed.verdict_items()["perf"]
    rows = _perf_rows(tmp_path / "metrics.csv")
    assert [int(r["step"]) for r in rows] == [1, 3, 5, 7, 9, 11], rows
    assert perf["log_steps"] == 5 and perf["warmup_steps"] == 2, perf  # the window of steps 0-1 left out
    assert perf["flops_per_step"] > 0 and perf["peak_flops"] > 0 and perf["dtype"] == "fp32", perf
    for row in rows:  # a step's count of each, back from the rates and the seconds a step
        step_s = row["perf/step_s"]
        assert _close(row["perf/tokens_per_s"] * step_s, accumulate * BATCH * LENGTH), row
        assert _close(row["perf/loss_tokens_per_s"] * step_s, accumulate * BATCH), row
        assert _close(row["perf/examples_per_s"] * step_s, accumulate * BATCH), row
        assert _close(row["perf/mfu"], perf["flops_per_step"] / step_s / perf["peak_flops"], 1e-3), row
        assert _close(sum(row.get(f"perf/time/{p}") or 0.0 for p in PHASES), step_s), row
        assert "perf/time/finish" not in row, row  # after the last step: time_share's alone
        assert row["perf/time/harness"] > 0 and row["perf/time/data_wait"] > 0, row  # the guard; the loader
    assert set(perf) >= set(FIGURES) and all(perf[name] > 0 for name in FIGURES), perf
    assert set(perf["time_share"]) == set(PHASES) and 0.5 < sum(perf["time_share"].values()) < 1.5, perf
    assert speed_of(trainer) == [speed]
    # nothing of the timing outlives the fit: the guard's hooks, the trainer's save_checkpoint, the profiler
    assert not {"on_before_optimizer_step", "on_train_batch_end"} & set(vars(guard)), vars(guard).keys()
    assert "save_checkpoint" not in vars(trainer) and not {"start", "stop", "profile"} & set(
        vars(trainer.profiler)
    )


@pytest.mark.slow  # ~10 s: a train.py run
def test_the_default_run_reports_its_speed_on_its_page(tmp_path, data_root):
    result = train(cwd=tmp_path, data_root=data_root)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    verdict = json.loads((run / "verdict.json").read_text())
    perf = verdict["perf"]
    assert verdict["status"] == "PASS" and perf["log_steps"] >= 5, perf  # every step logs in overfit mode
    assert all(perf[name] > 0 for name in FIGURES) and perf["dtype"] == "fp32", perf
    shares = perf["time_share"]
    assert shares["forward_backward"] > 0 and shares["harness"] > 0, perf  # the probes' share too
    rows = _perf_rows(run / "metrics.csv")
    assert len(rows) == verdict["steps"] and all(r["perf/step_s"] > 0 for r in rows), len(rows)
    page = (run / "report.html").read_text()
    speed = page.split('<section id="speed">', 1)[1].split("</section>", 1)[0]
    assert 'id="speed-table"' in speed and "where the training loop&#x27;s time went" in speed, speed[:500]
    assert speed.count('<g class="part">') >= 3 and "forward_backward" in speed, speed[
        :500
    ]  # the stacked bar
    assert "seconds a step by phase" in speed and "<polyline" in speed


def test_the_config_builds_the_speed_or_nothing():
    node = {"_target_": "harness.train.perf.speed.Speed", "window": 7, "peak_flops": 1e12}
    (speed,) = speed_callbacks(OmegaConf.create({"perf": node}))
    assert isinstance(speed, Speed) and (speed.window, speed.peak_flops, speed.warmup) == (7, 1e12, 5)
    assert speed_callbacks(OmegaConf.create({"perf": {**node, "enabled": False}})) == []
    assert speed_callbacks(OmegaConf.create({"perf": None})) == []
    # its ranges are its declaration's (harness.config.groups.trainer.Perf), held at the door
    for key, value in (("window", 0), ("data_wait", 1.5), ("peak_flops", -1), ("warmup", -2)):
        perf = OmegaConf.merge(OmegaConf.structured(Perf), {key: value})
        with pytest.raises(ConfigError, match=rf"^perf\.{key}={value}: "):
            check_declared(OmegaConf.create({"perf": perf}))
    with pytest.raises(ValidationError):  # a kind its type refuses, while composing
        OmegaConf.merge(OmegaConf.structured(Perf), {"window": "x"})


def test_a_page_without_speed_figures_says_so_and_one_with_them_draws_them(tmp_path):
    verdict = {"status": "PASS", "mode": "overfit", "steps": 3, "final_loss": 0.01}
    (tmp_path / "verdict.json").write_text(json.dumps(verdict))
    page = write_run_page(tmp_path, defaults=False).read_text()
    assert "no speed figures" in page.split('<section id="speed">', 1)[1].split("</section>", 1)[0]
    shares = dict.fromkeys(PHASES, 0.0) | {"data_wait": 0.25, "forward_backward": 0.5, "other": 0.25}
    verdict["perf"] = dict.fromkeys(FIGURES, 1.0) | {"time_share": shares, "log_steps": 3, "peak": "test"}
    (tmp_path / "verdict.json").write_text(json.dumps(verdict))
    (tmp_path / "metrics.csv").write_text(
        "step,perf/tokens_per_s,perf/time/data_wait\n1,100.0,0.5\n2,110.0,0.4\n"
    )
    speed = write_run_page(tmp_path, defaults=False).read_text().split('<section id="speed">', 1)[1]
    speed = speed.split("</section>", 1)[0]
    assert speed.count('<g class="part">') == 3 and "data_wait 25%" in speed, speed  # zero shares left out
    assert "<polyline" in speed and "no speed figures" not in speed


def test_the_sweep_summary_lists_each_jobs_speed(tmp_path):
    for job, perf in (("0", {"tokens_per_s": 1234.5, "mfu": 0.25}), ("1", None)):
        (tmp_path / job).mkdir()
        verdict = {"status": "PASS", "mode": "overfit", "steps": 3} | ({"perf": perf} if perf else {})
        (tmp_path / job / "verdict.json").write_text(json.dumps(verdict))
    rows = {job.row["job"]: job.row for job in collect(tmp_path)}
    assert (rows["0"]["tokens_per_s"], rows["0"]["mfu"]) == (1234.5, 0.25)
    assert (rows["1"]["tokens_per_s"], rows["1"]["mfu"]) == (None, None)


@pytest.mark.slow  # ~25 s: two DDP processes on gloo
def test_several_ranks_count_every_ranks_tokens(tmp_path, data_root):
    result = train(
        "mode=full",
        "trainer=ddp",
        "data.batch_size=8",
        "mode.max_steps=20",
        "mode.log_every=5",
        "mode.val_every=100",
        "preflight=false",
        "probes=off",
        "mode.progress_bar=false",
        cwd=tmp_path,
        data_root=data_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _perf_rows(tmp_path / "run" / "metrics.csv")
    assert len(rows) == 4, rows
    for row in rows:  # 2 ranks x 8 examples of 32 positions, one label each in the loss
        assert _close(row["perf/tokens_per_s"] * row["perf/step_s"], 2 * 8 * 32), row
        assert _close(row["perf/loss_tokens_per_s"] * row["perf/step_s"], 2 * 8), row
        assert _close(row["perf/examples_per_s"] * row["perf/step_s"], 2 * 8), row
        assert row["perf/mfu"] > 0, row
