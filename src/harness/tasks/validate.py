"""`validate`, the one entry to a config's rules: every declaration's ranges and rules (harness.config.declare), the
trainer's (harness.train.trainer_args), and the rules across parts no declaration holds (files, keys that depend on
each other). `check_types` checks the kinds of values the command line gave to undeclared keys."""

# Hydra refuses a misspelled key, an unknown option and a wrong type while composing (harness.config.schema). The
# command line validates each job's config once (harness.cli.overrides); `run` called from code validates it all.

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.config.declare import check_declared
from harness.config.explain import KIND_WORDS, value_kind
from harness.config.extras import check_extras
from harness.config.schema import MODES
from harness.errors import ConfigError
from harness.report import optimized_metric
from harness.train import trainer_args
from harness.train.distributed import devices as device_rules

#: keys whose default is a number but that take other kinds too (Lightning's devices: "auto", "0,1", [0, 1])
ALSO = {"trainer.devices": ("str", "list")}
#: the `+flag=true` switches the harness reads
FLAGS = ("overwrite", "resume_any_mode")


def _whole_number(cfg: DictConfig, key: str, minimum: int, hint: str, root: str = "") -> int:
    """The value at dotted `key` of `cfg` (at `root` of the whole config) if a whole number >= `minimum`, else a
    ConfigError naming the full key, with `hint`."""
    value = cfg
    for part in key.split("."):
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        name = f"{root}.{key}" if root else key
        raise ConfigError(name, value, f"must be a whole number >= {minimum}; {hint}")
    return value


def _check_files(cfg: DictConfig) -> None:
    """Refuse a preflight test or checkpoint file the config names that does not exist, and a ckpt_path the mode
    cannot take."""
    for path in cfg.get("preflight_tests", None) or []:
        if not Path(path).is_file():
            raise ConfigError(
                "preflight_tests",
                str(path),
                f"no such file (looked in {Path.cwd()}); give the path "
                "of a pytest file, e.g. +preflight_tests=[tests/preflight_mine.py]",
            )
    if cfg.ckpt_path not in (None, "last") and not Path(cfg.ckpt_path).is_file():
        raise ConfigError(
            "ckpt_path",
            cfg.ckpt_path,
            "no such file; give the path of a .ckpt file "
            "(a full run saves <run dir>/checkpoints/last.ckpt), or last",
        )
    if cfg.mode.name == "eval" and cfg.ckpt_path is None:
        raise ConfigError(
            "ckpt_path",
            None,
            "mode=eval evaluates a checkpoint: give ckpt_path=<a .ckpt file> or ckpt_path=last",
        )
    if cfg.mode.name == "overfit" and cfg.ckpt_path is not None:
        raise ConfigError(
            "ckpt_path", cfg.ckpt_path, "resuming is for mode=full; an overfit run always starts fresh"
        )


def _missing_keys(cfg: DictConfig) -> list[str]:
    """The `???` keys, sorted, found without resolving any value (`${hydra:...}` resolves only in a running job)."""
    found = []

    def gather(node) -> None:
        for key in range(len(node)) if isinstance(node, ListConfig) else node:
            child = node._get_node(key)
            if child._is_missing():
                found.append(node._get_full_key(key))
            elif isinstance(child, (DictConfig, ListConfig)) and not (
                child._is_interpolation() or child._is_none()
            ):
                gather(child)

    gather(cfg)
    return sorted(found)


def check_types(cfg: DictConfig, base: DictConfig, keys: list[str]) -> None:
    """Refuse a value of `keys` (the dotted keys the command line set) whose kind differs from the number or bool
    the config file has (`base`: composed with the same group choices, without the values)."""
    for key in keys:
        default = OmegaConf.select(base, key, default=None, throw_on_resolution_failure=False)
        given = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        wanted, got = value_kind(default), value_kind(given)
        if wanted not in ("number", "bool") or got is None or got == wanted:
            continue
        if got in ALSO.get(key, ()):
            continue
        raise ConfigError(
            key,
            given,
            f"{key} must be {KIND_WORDS[wanted]}, not {given!r} (the config has {key}={default}); "
            "text that looks like a number needs no quotes",
        )


def _check_flags(cfg: DictConfig) -> None:
    """Refuse a FLAGS switch that is not true or false."""
    for name in FLAGS:
        value = cfg.get(name, False)
        if not isinstance(value, bool):
            raise ConfigError(name, value, f"must be true or false (+{name}=true)")


def _check_across(cfg: DictConfig) -> None:
    """The rules between parts: the tokenizer and the data reading it, the model's positions and the data's length."""
    kind_of = (cfg.get("tokenizer") or {}).get("kind", "char")
    if kind_of != "char" and "tokenizer" not in cfg.data:
        raise ConfigError(
            "tokenizer",
            kind_of,
            f"this data ({cfg.data._target_}) tokenizes by its own alphabet of characters; "
            "tokenizer=bpe and tokenizer=hf work with data=corpus",
        )
    max_len = cfg.model.get("max_len")
    if isinstance(max_len, int) and max_len < cfg.data.length:
        raise ConfigError(
            "data.length",
            cfg.data.length,
            f"longer than model.max_len={max_len}, the longest input the "
            f"model can embed; raise model.max_len or shorten data.length",
        )


def notices(cfg: DictConfig) -> list[str]:
    """What a valid config will do that its author may not expect, one line each (the door prints them)."""
    said = []
    mode = cfg.mode
    if mode.name == "full" and isinstance(mode.get("val_every"), int) and mode.max_steps < mode.val_every:
        said.append(
            f"mode.max_steps={mode.max_steps} is below mode.val_every={mode.val_every}: no validation will run, "
            f"and the run ends with no val loss; lower mode.val_every (e.g. mode.val_every={mode.max_steps})"
        )
    return said


def validate(cfg: DictConfig, devices: bool = True) -> None:
    """Raise ConfigError on the composed config's first bad value. `devices`: also check the trainer's devices
    against this machine."""
    for key in _missing_keys(cfg):
        if not key.startswith("hydra"):
            raise ConfigError(key, "???", f"required: give it on the command line, e.g. {key}=...")
    _whole_number(
        cfg, "data.length", 1, "data.length is the number of tokens an example holds (try data.length=32)"
    )
    if cfg.mode.name not in MODES:
        raise ConfigError("mode.name", cfg.mode.name, f"choose one of {', '.join(MODES)}")
    _check_files(cfg)
    check_extras(
        cfg
    )  # before a part that needs an extra is built: an ImportError after the preflight is late
    _check_across(cfg)
    check_declared(cfg)
    _check_flags(cfg)
    trainer_args.check(cfg)
    device_rules.processes(
        cfg.trainer
    )  # trainer.devices is a count, a list of ids or auto, wherever the job runs
    if devices:
        device_rules.check_devices(cfg.trainer)
    optimized_metric.check_metric(cfg.get("optimized_metric"), cfg.mode.name)
