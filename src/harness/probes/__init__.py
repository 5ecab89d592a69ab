"""Probes: Lightning callbacks that log what the network does while it learns (brief P1)."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig


def build_probes(cfg: DictConfig, run_dir: Path, data, overfit: bool) -> list[pl.Callback]:
    """The probes `cfg` (the `probes` config group) turns on for this run."""
    return []
