"""The Lightning Trainer and its callbacks, as the config builds them: what the harness sets itself (one table,
harness.train.rules.OWNED, which also refuses those keys under trainer.), then every trainer.NAME as given, and the
`callbacks` group's entries."""

from __future__ import annotations

import re
from pathlib import Path

import pytorch_lightning as pl
from lightning_fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf

from harness.config import build
from harness.errors import ConfigError
from harness.train.rules import owned


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list, loggers: list) -> pl.Trainer:
    """The Lightning Trainer: what the harness sets from its own keys (harness.train.rules.OWNED), then every
    trainer.NAME as given, a value with a _target_ built (e.g. a profiler)."""
    harness_sets = owned(cfg, run_dir, callbacks, loggers)
    given = {"num_sanity_val_steps": 0}  # harness's default, which trainer.num_sanity_val_steps may change
    for key, value in cfg.trainer.items():
        if isinstance(value, DictConfig) and "_target_" in value:
            given[key] = build(value, f"trainer.{key}")
        else:
            given[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    # no ModelSummary among the callbacks (callbacks.model_summary=null): none, rather than Lightning's own
    given.setdefault("enable_model_summary", any(isinstance(c, pl.callbacks.ModelSummary) for c in callbacks))
    try:
        return pl.Trainer(**harness_sets, **given)
    except TypeError as err:
        name = re.search(r"'(\w+)'", str(err))
        key = name.group(1) if name else next((k for k in given if f"`{k}`" in str(err)), "?")
        raise ConfigError(f"trainer.{key}", given.get(key, ""), f"Lightning refuses it ({err})") from None
    except MisconfigurationException as err:  # e.g. a ModelCheckpoint in callbacks in overfit mode
        named = [type(c).__name__ for c in callbacks if type(c).__name__ in str(err)]
        key = next((k for k in given if k in str(err)), None)
        if named or not key:
            raise ConfigError("callbacks", ", ".join(named), f"Lightning refuses it: {err}") from None
        raise ConfigError(f"trainer.{key}", given[key], f"Lightning refuses it: {err}") from None


def build_callbacks(cfg: DictConfig) -> list[pl.Callback]:
    """The `callbacks` group's entries (conf/callbacks/), each built from its `_target_`; one that is null or
    `enabled: false` is left out. None where a fork has no callbacks group."""
    made = []
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is None:
            continue
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ConfigError(
                f"callbacks.{name}", node, "give a callback's _target_ (its class) and arguments, or null"
            )
        arguments = OmegaConf.to_container(node, resolve=True)  # `enabled` may point anywhere in the config
        if arguments.pop("enabled", True):
            made.append(build(OmegaConf.create(arguments), f"callbacks.{name}"))
    return made
