"""The one entry to the config's rules (`validate`), and the rules across parts: every user mistake found
before any work, as one line with the fix.

Hydra already refuses, while composing, a misspelled key, an unknown group option and a value of the wrong type
(harness.config.schema). A part's own rules live beside the part (harness.data.rules, harness.models.rules,
harness.train.rules, harness.train.distributed.devices, harness.report.optimized_metric) and are run from here; here live the rules a
type cannot say that cross parts (ranges of every part's keys, taken from their tables; files the config names;
keys that depend on each other), and the kind check of values the command line gave.

The command line validates each job's config once, before anything runs (harness.cli.overrides); a job started by it
then checks only where it runs (its devices). `harness.tasks.training.run` called in code validates the whole."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.config.explain import KIND_WORDS, kind
from harness.config.extras import check_extras
from harness.config.schema import MODES
from harness.data import rules as data_rules
from harness.errors import ConfigError
from harness.models import rules as model_rules
from harness.report import optimized_metric
from harness.train import rules as train_rules
from harness.train.distributed import devices as device_rules

#: every part's keys with a range, from the parts' own tables: key -> (smallest, whole number?, why)
RANGES = {**data_rules.RANGES, **model_rules.RANGES, **train_rules.RANGES}
#: keys whose default is a number but that take other kinds too (Lightning's devices: "auto", "0,1", [0, 1])
ALSO = {"trainer.devices": ("str", "list")}
#: the `+flag=true` switches the harness reads
FLAGS = ("overwrite", "resume_any_mode")


def whole_number(cfg: DictConfig, key: str, minimum: int, hint: str, root: str = "") -> int:
    """The value at dotted `key` of `cfg` (itself at `root` of the whole config), a whole number >= `minimum`,
    or a ConfigError naming the full key with `hint`."""
    value = cfg
    for part in key.split("."):
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        name = f"{root}.{key}" if root else key
        raise ConfigError(name, value, f"must be a whole number >= {minimum}; {hint}")
    return value


def _check_files(cfg: DictConfig) -> None:
    """The files the config names exist: a preflight test missing would be skipped, a checkpoint missing
    found only after the data and the model are built."""
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


def missing_keys(cfg: DictConfig) -> list[str]:
    """The `???` keys, sorted: OmegaConf.missing_keys without resolving any value on the way, so a value only a
    running job can resolve (`${hydra:runtime.output_dir}`, as paths.output_dir and a callback's dirpath use)
    does not fail the check the command line makes before the job."""
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
    """Each of `keys` (the dotted keys the command line set) holds a value of the kind the config file gives it
    (`base`: composed with the same group choices, without the values): `optim.lr=abc` where adamw.yaml has
    3e-3 is refused now, not by the optimizer after the data and the preflight. Keys Hydra's schema types
    (harness/config/schema.py) are refused by Hydra already; null and a key the files do not hold pass."""
    for key in keys:
        default = OmegaConf.select(base, key, default=None, throw_on_resolution_failure=False)
        given = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        wanted, got = kind(default), kind(given)
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


def _check_ranges(cfg: DictConfig) -> None:
    """Each key of RANGES that the config holds (and is not null) lies in its range."""
    for key, (low, whole, why) in RANGES.items():
        value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        if value is None or (isinstance(value, str) and value.startswith("${")):
            continue
        if kind(value) != "number" or (whole and not float(value).is_integer()):
            noun = "a whole number" if whole else "a number"
            raise ConfigError(key, value, f"must be {noun}; {why}")
        if value < low:
            raise ConfigError(key, value, f"must be >= {low}; {why}")


def _check_flags(cfg: DictConfig) -> None:
    """The `+flag=true` switches the harness reads (FLAGS): true or false."""
    for name in FLAGS:
        value = cfg.get(name, False)
        if not isinstance(value, bool):
            raise ConfigError(name, value, f"must be true or false (+{name}=true)")


def _check_across(cfg: DictConfig) -> None:
    """The rules between parts: the tokenizer and the data that reads it, the model's positions and the data's
    length."""
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


def validate(cfg: DictConfig, devices: bool = True) -> None:
    """Raise ConfigError on the first bad value of the composed config. `devices`: also hold the trainer's
    devices against this machine (the door leaves that to the job when a cluster launcher runs it elsewhere)."""
    for key in missing_keys(cfg):
        if not key.startswith("hydra"):
            raise ConfigError(key, "???", f"required: give it on the command line, e.g. {key}=...")
    whole_number(cfg, "n", 1, "n is the number of examples to overfit (try n=1)")
    whole_number(cfg, "seed", 0, "seed seeds every random generator (try seed=0)")
    whole_number(
        cfg, "data.length", 1, "data.length is the number of tokens an example holds (try data.length=32)"
    )
    if cfg.preflight not in (True, False, "warn"):
        raise ConfigError(
            "preflight", cfg.preflight, "choose true (stop on FAIL), warn (report, go on) or false (skip)"
        )
    if cfg.mode.name not in MODES:
        raise ConfigError("mode.name", cfg.mode.name, f"choose one of {', '.join(MODES)}")
    _check_files(cfg)
    check_extras(
        cfg
    )  # before a part that needs an extra is built: an ImportError after the preflight is late
    _check_across(cfg)
    _check_ranges(cfg)
    _check_flags(cfg)
    train_rules.check(cfg)
    device_rules.processes(
        cfg.trainer
    )  # trainer.devices is a count, a list of ids or auto, wherever the job runs
    if devices:
        device_rules.check_devices(cfg.trainer)
    optimized_metric.check_metric(cfg.get("optimized_metric"), cfg.mode.name)
