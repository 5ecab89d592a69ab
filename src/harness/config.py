"""Validation at the door: every user mistake found before any work, as one line with the fix; and
`build`, which instantiates a config node with the same promise.

Hydra already refuses, while composing, a misspelled key, an unknown group option and a value of the wrong
type (the schema, harness/schema.py); these are the rules a type cannot say: ranges, choices, files that
must exist, keys that depend on each other. Model and data keys are checked by the classes they are passed
to; what only the data can tell (n larger than the training split) is checked where the data is read."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.distributed import check_devices, processes
from harness.door import check_values
from harness.errors import ConfigError
from harness.search import check_metric

#: harness.modes.MODES, which train (named here: Lightning is slow to import), and eval (harness.evaluate)
MODES = ("overfit", "full", "eval")

#: Trainer arguments harness.run.build_trainer sets itself, each with the key to use instead: trainer.NAME would
#: clash with it (Lightning's "multiple values" TypeError), so it is refused at the door. Any other Trainer
#: argument goes through as trainer.NAME (+trainer.NAME=value), and one whose value has a _target_ is built.
TRAINER_KEYS = {
    "max_steps": "use mode.max_steps",
    "max_epochs": "the harness counts steps, not epochs; use mode.max_steps",
    "val_check_interval": "use mode.val_every (steps between validations)",
    "check_val_every_n_epoch": "the harness validates by steps; use mode.val_every",
    "log_every_n_steps": "use mode.log_every",
    "enable_progress_bar": "use mode.progress_bar (callbacks=rich for Rich's bar)",
    "enable_checkpointing": "the mode decides: mode=full saves checkpoints (mode.ckpt_every), "
    "overfit mode its final weights",
    "use_distributed_sampler": "the mode decides: overfit gives every rank the same n examples, "
    "mode=full each rank its share",
    "default_root_dir": "the run dir is hydra.run.dir (under paths.log_dir)",
    "callbacks": "add one to the callbacks group (+callbacks.NAME._target_=...) or under probes.extra",
    "logger": "choose logger=csv|tensorboard|wandb (metrics.csv is always written)",
    "overfit_batches": "use mode=overfit n=... (memorize n examples, judged PASS/FAIL)",
}


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


def check_compile(value) -> None:
    """compile: false, true (torch.compile's default backend) or the name of a torch.compile backend."""
    if isinstance(value, bool):
        return
    if isinstance(value, str):
        import torch

        if value in torch._dynamo.list_backends(exclude_tags=()):
            return
        raise ConfigError(
            "compile",
            value,
            f"no such torch.compile backend; choose true, false or one of "
            f"{', '.join(torch._dynamo.list_backends())}",
        )
    raise ConfigError(
        "compile",
        value,
        "choose true (torch.compile the training step), false, or a backend name such as aot_eager",
    )


#: the shapes of harness.optim.schedule
SHAPES = ("constant", "cosine", "linear")


def check_schedule(shape, warmup_steps, min_lr, peak: float) -> None:
    """harness.optim.schedule's arguments: checked at the door (validate) and when the schedule is built."""
    if shape not in SHAPES:
        raise ConfigError("schedule.shape", shape, f"choose one of {', '.join(SHAPES)}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ConfigError("schedule.warmup_steps", warmup_steps, "must be a whole number >= 0 (try 100)")
    if min_lr is not None and not 0 <= min_lr <= peak:
        raise ConfigError("schedule.min_lr", min_lr, f"must lie between 0 and optim.lr={peak}, or null")


def check_files(cfg: DictConfig) -> None:
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


def check_trainer(cfg: DictConfig) -> None:
    """No trainer key that harness sets itself (TRAINER_KEYS); a fast dev run only as debug=fdr, which reports it
    as DEBUG rather than judging one batch a FAIL."""
    given = OmegaConf.to_container(cfg.trainer)  # unresolved: the value as the user wrote it
    for key, fix in TRAINER_KEYS.items():
        if key in given:
            raise ConfigError(f"trainer.{key}", given[key], f"harness sets it; {fix}")
    judged = (cfg.get("debug") or {}).get("judge", True)
    if given.get("fast_dev_run") and judged:
        raise ConfigError(
            "trainer.fast_dev_run",
            given["fast_dev_run"],
            "use debug=fdr: the same one-batch run, reported as status DEBUG instead of judged",
        )


def validate(cfg: DictConfig, devices: bool = True) -> None:
    """Raise ConfigError on the first bad value of the composed config. `devices`: also hold the trainer's devices
    against this machine (the CLI leaves that to the job when a cluster launcher runs it elsewhere)."""
    for key in missing_keys(cfg):
        if not key.startswith("hydra"):
            raise ConfigError(key, "???", f"required: give it on the command line, e.g. {key}=...")
    whole_number(cfg, "n", 1, "n is the number of examples to overfit (try n=1)")
    whole_number(cfg, "seed", 0, "seed seeds every random generator (try seed=0)")
    whole_number(
        cfg, "data.length", 1, "data.length is the number of tokens an example holds (try data.length=32)"
    )
    whole_number(cfg, "mode.max_steps", 1, "mode.max_steps is the step budget (try mode.max_steps=500)")
    if cfg.mode.name == "full":
        whole_number(
            cfg,
            "mode.ckpt_every",
            1,
            "steps between periodic checkpoints in mode=full (try mode.ckpt_every=100)",
        )
    if cfg.preflight not in (True, False, "warn"):
        raise ConfigError(
            "preflight", cfg.preflight, "choose true (stop on FAIL), warn (report, go on) or false (skip)"
        )
    if cfg.mode.name not in MODES:
        raise ConfigError("mode.name", cfg.mode.name, f"choose one of {', '.join(MODES)}")
    if cfg.mode.name == "overfit" and not cfg.mode.target_loss >= 0:
        raise ConfigError(
            "mode.target_loss", cfg.mode.target_loss, "must be >= 0 (try mode.target_loss=0.02)"
        )
    check_files(cfg)
    schedule = cfg.get("schedule")
    if schedule is not None and schedule.get("_target_") == "harness.optim.schedule":
        peak = (cfg.get("optim") or {}).get("lr", 0.0)
        check_schedule(schedule.get("shape"), schedule.get("warmup_steps"), schedule.get("min_lr"), peak)
    kind = (cfg.get("tokenizer") or {}).get("kind", "char")
    if kind != "char" and "tokenizer" not in cfg.data:
        raise ConfigError(
            "tokenizer",
            kind,
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
    check_values(cfg)  # ranges of the built-in keys, the +flags, wandb online (a key, a reachable server)
    check_trainer(cfg)
    processes(cfg.trainer)  # trainer.devices is a count, a list of ids or auto, wherever the job runs
    if devices:
        check_devices(cfg.trainer)
    check_compile(cfg.compile)
    check_metric(cfg.get("optimized_metric"))


def unknown_argument(target, names) -> str | None:
    """The first of `names` that `target` (a class or function) takes no argument of; None if it takes them
    all, or any keyword (**kwargs), or its signature cannot be read."""
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return next((name for name in names if name not in params), None)


def refuse_argument(node: DictConfig, key: str, target, names) -> None:
    name = unknown_argument(target, names)
    if name is not None:
        raise ConfigError(
            f"{key}.{name}",
            node.get(name),
            f"{node._target_} takes no argument {name!r}; check the spelling or remove it",
        ) from None


def build(node: DictConfig, key: str, **kwargs):
    """hydra.utils.instantiate of the config node at `key`, with a user's mistake turned into a one-line
    ConfigError: a _target_ that cannot be imported, an argument it does not take, a value it refuses.
    A `_partial_` node's arguments are held against its target's signature now, not when it is called."""
    try:
        made = instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        if isinstance(cause, ImportError) or str(err).startswith("Error locating target"):
            raise ConfigError(
                f"{key}._target_",
                node.get("_target_"),
                "cannot be imported: check the module "
                f"path and that its package is importable from here ({cause or err})",
            ) from None
        if isinstance(cause, TypeError):
            names = [k for k in node if not str(k).startswith("_")] + list(kwargs)
            refuse_argument(node, key, get_object(node._target_), names)
        if isinstance(cause, ValueError):
            raise ConfigError(key, node.get("_target_"), str(cause)) from None
        raise
    if isinstance(made, functools.partial):
        refuse_argument(node, key, made.func, list(made.keywords))
    return made
