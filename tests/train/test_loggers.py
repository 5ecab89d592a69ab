"""metrics.csv: the harness's writer gives Lightning's layout and values (float32-exact), row by row on disk."""

from __future__ import annotations

import csv
import math
import struct

import torch
from pytorch_lightning.loggers import CSVLogger

from harness.train.loggers import MetricsCSV


def _f32(value: str) -> float:
    return struct.unpack("f", struct.pack("f", float(value)))[0]


def _read(path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames), list(reader)


def _calls() -> list[tuple[dict, int]]:
    """Log calls as a run makes them: probe rows every step, a tracker row now and then, keys that appear late."""
    torch.manual_seed(0)
    calls = []
    for step in range(30):
        values = torch.randn(6).tolist()  # float32 values, as the probes log them
        calls.append(({f"grad_norm/p{i}": v for i, v in enumerate(values)}, step))
        if step % 10 == 9:
            calls.append(({"train/loss": torch.tensor(values[0]), "epoch": 0}, step))
        if step == 20:  # a key first seen mid-run: the header is rewritten
            calls.append(({"val/loss": math.nan, "reseed/batch_hash": float(0xFFFFFF)}, step))
    return calls


def test_same_file_as_lightnings_writer(tmp_path):
    theirs = CSVLogger(tmp_path / "theirs", name="", version="", flush_logs_every_n_steps=1)
    ours = MetricsCSV(tmp_path / "ours", name="", version="", flush_logs_every_n_steps=1)
    for metrics, step in _calls():
        theirs.log_metrics(metrics, step=step)
        ours.log_metrics(metrics, step=step)
    theirs.finalize("success")
    ours.finalize("success")
    header, expected = _read(tmp_path / "theirs" / "metrics.csv")
    our_header, got = _read(tmp_path / "ours" / "metrics.csv")
    assert our_header == header and len(got) == len(expected) == 34
    for row, want in zip(got, expected, strict=True):
        for key, value in want.items():
            if value in ("", "nan") or key in ("step", "epoch"):
                assert row[key] == value, (key, row[key], value)
            else:  # 9 significant digits: the same float32
                assert _f32(row[key]) == _f32(value), (key, row[key], value)
    assert got[-1]["reseed/batch_hash"] == "" and any(r["reseed/batch_hash"] == "16777215" for r in got)


def test_every_row_is_on_disk_when_logged(tmp_path):
    """A run killed between two steps keeps every row logged before (the file is flushed at each save)."""
    logger = MetricsCSV(tmp_path, name="", version="", flush_logs_every_n_steps=1)
    for metrics, step in _calls()[:12]:
        logger.log_metrics(metrics, step=step)
        _, rows = _read(tmp_path / "metrics.csv")
        assert int(rows[-1]["step"]) == step and rows[-1][next(iter(metrics))] != ""
    logger.finalize("success")


def test_a_resumed_run_appends_to_its_metrics_csv(tmp_path):
    """keep=True (a run resumed in its own run dir): the rows already there stay, a key new to the resumed run
    widens the header; keep=False: Lightning's behaviour, the earlier file is replaced."""
    calls = _calls()
    first = MetricsCSV(tmp_path, name="", version="", flush_logs_every_n_steps=1)
    for metrics, step in calls[:12]:
        first.log_metrics(metrics, step=step)
    first.finalize("success")
    _, before = _read(tmp_path / "metrics.csv")
    resumed = MetricsCSV(tmp_path, name="", version="", flush_logs_every_n_steps=1, keep=True)
    for metrics, step in calls[12:]:
        resumed.log_metrics(metrics, step=step)
    resumed.finalize("success")
    header, rows = _read(tmp_path / "metrics.csv")
    assert len(rows) == len(calls) and "val/loss" in header, (len(rows), header)
    assert [r["step"] for r in rows[: len(before)]] == [r["step"] for r in before]
    assert [int(r["step"]) for r in rows] == [step for _, step in calls]
    fresh = MetricsCSV(tmp_path, name="", version="", flush_logs_every_n_steps=1)
    fresh.log_metrics({"train/loss": 1.0}, step=0)
    fresh.finalize("success")
    assert len(_read(tmp_path / "metrics.csv")[1]) == 1
