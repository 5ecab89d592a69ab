"""The Lightning Trainer and callbacks as the config builds them: `build_trainer` (rules.OWNED's arguments,
then every trainer.NAME), `build_callbacks`."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
from lightning_fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf

from harness.config import build
from harness.config.build import refused
from harness.errors import ConfigError
from harness.train.trainer_args import harness_trainer_args


def _given_arguments(trainer: DictConfig) -> dict:
    """The Trainer arguments the trainer node gives (a `_target_` built), over num_sanity_val_steps=0."""
    given = {"num_sanity_val_steps": 0}
    for key, value in trainer.items():
        if isinstance(value, DictConfig) and "_target_" in value:
            given[key] = build(value, f"trainer.{key}")
        else:
            given[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return given


def build_trainer(
    cfg: DictConfig,
    run_dir: Path,
    callbacks: list,
    loggers: list,
    base: DictConfig | None = None,
    order: list[str] = (),
) -> pl.Trainer:
    """The Lightning Trainer; a refused value a ConfigError naming its key (`base`, `order`: to find it)."""
    harness_sets = harness_trainer_args(cfg, run_dir, callbacks, loggers)
    # no ModelSummary among the callbacks (callbacks.model_summary=null): none, rather than Lightning's own
    summary = any(isinstance(c, pl.callbacks.ModelSummary) for c in callbacks)

    def attempt(trainer: DictConfig) -> pl.Trainer:
        arguments = _given_arguments(trainer)
        arguments.setdefault("enable_model_summary", summary)
        return pl.Trainer(**harness_sets, **arguments)

    try:
        return attempt(cfg.trainer)
    except ConfigError:  # a value built from a _target_ (trainer.profiler) refused with its key
        raise
    except MisconfigurationException as err:  # e.g. a ModelCheckpoint in callbacks in overfit mode
        named = [type(c).__name__ for c in callbacks if type(c).__name__ in str(err)]
        if named:
            raise ConfigError("callbacks", ", ".join(named), f"Lightning refuses it: {err}") from None
        raise refused(err, "trainer", cfg.trainer, base, order, attempt, what="Lightning") from None
    except Exception as err:  # a value Lightning refuses: ValueError, TypeError, an accelerator not installed
        raise refused(err, "trainer", cfg.trainer, base, order, attempt, what="Lightning") from None


def build_callbacks(cfg: DictConfig) -> list[pl.Callback]:
    """The `callbacks` group's entries built from their `_target_`; null or `enabled: false` left out."""
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
