"""The probes of a run, built from the `probes` config node (`build_probes`; `from_config` is its `_target_`):
every entry with a `_target_`, plus the builder's `full` and `enabled`; Probes share one ProbeSet."""

from __future__ import annotations

import logging
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf, open_dict

from harness.config import build
from harness.config.groups.probes import MODES
from harness.errors import ConfigError
from harness.probes.probe import Probe, RunInfo
from harness.probes.probeset import ProbeSet, undispatchable_overrides

log = logging.getLogger(__name__)

#: keys of the `probes` node that are settings of the whole, not probe entries
SETTINGS = ("enabled", "plots", "wandb_watch", "extra")
#: keys of an entry that the builder reads, not passed to the probe
BUILDER_KEYS = ("full", "enabled")


def from_config(run_dir: Path, data, overfit: bool, loss=None, **sections) -> list[pl.Callback]:
    """build_probes for the `probes` config node, which names this function as its `_target_`."""
    return build_probes(OmegaConf.create(sections), run_dir=run_dir, data=data, overfit=overfit, loss=loss)


def build_probes(cfg: DictConfig, run_dir: Path, data, overfit: bool, loss=None) -> list[pl.Callback]:
    """The probes the `probes` node `cfg` turns on: the Probes as one ProbeSet, then plain callbacks."""
    if not cfg.get("enabled", True):
        return []
    entries = [(f"probes.{name}", node) for name, node in cfg.items() if _is_entry(name)]
    entries += [(f"probes.extra.{name}", node) for name, node in (cfg.get("extra") or {}).items()]
    probes, callbacks = [], []
    for key, node in entries:
        built = _build_entry(key, node, overfit)
        if isinstance(built, Probe):
            probes.append(built)
        elif built is not None:
            callbacks.append(built)
    run_dir = None if run_dir is None else Path(run_dir)
    run = RunInfo(run_dir=run_dir, data=data, overfit=overfit, plots=bool(cfg.get("plots", True)))
    if loss is not None:
        run.loss = loss
    return [ProbeSet(probes, run), *callbacks] if probes else callbacks


def _is_entry(name: str) -> bool:
    """Whether the key `name` of the `probes` node may hold a probe (not a setting or `_target_`)."""
    return not name.startswith("_") and name not in SETTINGS


def _per_mode(value) -> bool:
    """Whether an argument's `value` is given per mode: `{overfit: A, full: B}`."""
    return isinstance(value, DictConfig) and set(value.keys()) == set(MODES)


def _build_entry(key: str, node, overfit: bool) -> pl.Callback | None:
    """The callback the entry at `key` builds, or None where it is off; a mistake is a ConfigError naming it."""
    if node is None:
        return None
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError(key, node, "give {_target_: package.module.YourProbe, ...its arguments}")
    for flag in BUILDER_KEYS:
        if not isinstance(node.get(flag, True), bool):
            raise ConfigError(f"{key}.{flag}", node[flag], "must be true or false")
    if not node.get("enabled", True) or not (overfit or node.get("full", True)):
        return None
    spec = OmegaConf.masked_copy(node, [k for k in node if k not in BUILDER_KEYS])
    with open_dict(spec):
        for name, value in list(spec.items()):
            if _per_mode(value):
                spec[name] = value[MODES[0] if overfit else MODES[1]]
    try:
        probe = build(spec, key)
    except ConfigError as err:  # an argument the probe refused, named by the probe itself: name it in full
        if err.key.startswith("probes."):
            raise
        raise ConfigError(f"{key}.{err.key}", err.value, err.fix) from None
    if not isinstance(probe, pl.Callback):
        raise ConfigError(key, node._target_, "is not a pytorch_lightning Callback; a probe must be one")
    if isinstance(probe, Probe) and (refused := undispatchable_overrides(probe)):
        raise ConfigError(
            key,
            node._target_,
            f"overrides {', '.join(refused)}, which the probes' one callback cannot call for it: subclass "
            "pl.Callback instead of harness.probes.Probe (it then runs as a callback of its own)",
        )
    return probe
