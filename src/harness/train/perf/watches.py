"""The perf callbacks the training task adds, `perf_callbacks`: the Speed (speed.py), then the watches of
`perf.symptoms` (host_sync, recompiles, straggler); `speed_of` finds the Speed again for the verdict; the names the
training task reads of the package."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError
from harness.train.perf.host_sync import HostSync
from harness.train.perf.readout import Readout, readout_of
from harness.train.perf.recompiles import Recompiles
from harness.train.perf.speed import speed_callbacks, speed_of
from harness.train.perf.straggler import Straggler
from harness.train.perf.wall import RunClock

__all__ = ["Readout", "RunClock", "perf_callbacks", "readout_of", "speed_of"]  # what the training task reads

#: each watch: its key under perf.symptoms and its class
WATCHES = {"host_sync": HostSync, "recompiles": Recompiles, "straggler": Straggler}


def perf_callbacks(cfg: DictConfig, run_dir: Path) -> list[pl.Callback]:
    """The Speed, then each watch perf.symptoms enables (recompiles only under compile); [] where `perf` is null or
    perf.enabled=false."""
    node = cfg.get("perf")
    if node is None:
        return []
    arguments = OmegaConf.to_container(node, resolve=True)
    symptoms = arguments.pop("symptoms", None) or {}  # the Speed's arguments are the rest
    made = speed_callbacks(OmegaConf.create({"perf": arguments}))
    if not arguments.get("enabled", True):
        return made
    for key, kind in WATCHES.items():
        values = dict(symptoms.get(key) or {})
        if not values.pop("enabled", True) or (kind is Recompiles and not cfg.get("compile")):
            continue
        takes = [name for name in inspect.signature(kind).parameters if name != "run_dir"]
        unknown = [name for name in values if name not in takes]
        if unknown:
            raise ConfigError(
                f"perf.symptoms.{key}.{unknown[0]}",
                values[unknown[0]],
                f"no such key; it takes {', '.join(takes)}",
            )
        made.append(kind(run_dir, **values) if kind is Straggler else kind(**values))
    return made
