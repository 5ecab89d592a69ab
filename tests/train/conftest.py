"""What the fault and resume tests share: a short mode=full run that validates and checkpoints (FULL), the
environment a subprocess needs to import tests/ (FORK), and what a run leaves: a checkpoint's weights, the
training rows of its metrics.csv."""

from __future__ import annotations

import csv
import os

import torch

from tests.conftest import PROBES_OFF, ROOT

FORK = {"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
FULL = [
    "mode=full",
    "mode.val_every=12",
    "mode.ckpt_every=12",
    "data.size=56",
    "data.batch_size=8",
    "model.dropout=0.1",
    "preflight=false",
    "mode.progress_bar=false",
    *PROBES_OFF,
]


def _weights(path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def _rows(path) -> list[dict]:
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r.get("train/loss")]
