"""What the door checks of each part without building it (`check_targets`): every `_target_` a job's config names
imports and takes the arguments its node gives, the Trainer's arguments are Lightning's by name and kind, read from
their signatures; and a sweep's launcher as its plugin makes it (`check_launcher`). No part the run builds is built
here, no weights loaded, no data read: a value only a library's build refuses is named by its key in the run."""

# Each part's declaration (harness.config.groups) holds the ranges a built-in's library would refuse; what a fork's
# part refuses as it is built goes through the same one-line path in the run (harness.config.build), exit 2.

from __future__ import annotations

import contextlib
import inspect
import logging
import tempfile
import typing
import warnings

from omegaconf import DictConfig, OmegaConf, open_dict

from harness.config.build import check_target
from harness.config.explain import KIND_WORDS
from harness.errors import ConfigError

#: the loggers Lightning talks through when it is imported or its launcher built (devices found, tips)
CHATTY = ("pytorch_lightning", "lightning_fabric", "lightning")
#: the arguments the run passes a part's target beside its node's: the group -> their names
PASSED = {"model": ("vocab_size",)}
#: an annotation's plain type -> the kind of value it takes
KINDS = {bool: "bool", int: "int", float: "number", str: "str"}


@contextlib.contextmanager
def _libraries_quiet():
    """Inside, Lightning's log lines and every warning are held back (the run says them)."""
    loggers = [logging.getLogger(name) for name in CHATTY]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _kinds_of(annotation) -> set[str] | None:
    """The kinds of value an annotation takes (None: any, or one this check does not read)."""
    if annotation in KINDS:
        return {KINDS[annotation], *(("number",) if annotation is float else ())}
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return None  # its values, not its kind: Lightning's own check names them in the run
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        kinds = [_kinds_of(arg) for arg in typing.get_args(annotation) if arg is not type(None)]
        return None if any(k is None for k in kinds) else set().union(*kinds)
    return None


def _kind(value) -> str:
    """The kind of a config value, as _kinds_of names them."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return {float: "number", str: "str"}.get(type(value), "other")


def _check_trainer_arguments(trainer: DictConfig) -> None:
    """Each trainer key the Trainer takes, by name, and of a kind its annotation allows; a `_target_` value (a
    strategy, a profiler) imports and takes its arguments."""
    import pytorch_lightning as pl

    from harness.train.trainer_args import OWNED

    params = inspect.signature(pl.Trainer.__init__).parameters
    hints = typing.get_type_hints(pl.Trainer.__init__)
    for name in trainer:
        value = trainer._get_node(name)
        if isinstance(value, DictConfig) and "_target_" in value:
            check_target(value, f"trainer.{name}")
            continue
        if name in OWNED:
            continue
        if name not in params:
            raise ConfigError(
                f"trainer.{name}",
                trainer.get(name),
                "Lightning's Trainer takes no argument by this name; check its spelling",
            )
        kinds = _kinds_of(hints.get(name))
        given = trainer.get(name)
        if (
            kinds is None
            or given is None
            or _kind(given) in kinds
            or (_kind(given) == "int" and "number" in kinds)
        ):
            continue
        words = " or ".join(sorted(KIND_WORDS.get(k, k) for k in kinds))
        raise ConfigError(f"trainer.{name}", given, f"Lightning's Trainer takes {words} here")


def _check_probe_entries(probes: DictConfig) -> None:
    """Each probe entry's target, and each of probes.extra's, less the keys the probes' builder reads itself."""
    from harness.probes.assemble import BUILDER_KEYS, SETTINGS

    entries = [(f"probes.{k}", v) for k, v in probes.items() if k not in SETTINGS]
    entries += [(f"probes.extra.{k}", v) for k, v in (probes.get("extra") or {}).items()]
    for key, node in entries:
        if isinstance(node, DictConfig) and "_target_" in node:
            kept = [k for k in node if k not in BUILDER_KEYS]
            check_target(OmegaConf.masked_copy(node, kept), key)


def check_targets(cfg: DictConfig) -> None:
    """Every part of the job config `cfg` that names a `_target_`: it imports and takes the arguments given, and the
    Trainer's arguments are its own; a ConfigError names the key. Imports the targets' modules (torch, Lightning)."""
    from harness.compat import import_lightning

    with _libraries_quiet():
        import_lightning()
        for group in ("data", "model", "optim", "schedule", "loss"):
            node = cfg.get(group)
            if isinstance(node, DictConfig) and "_target_" in node:
                if group == "model" and cfg.mode.name == "eval":
                    continue  # the checkpoint's own model
                check_target(node, group, PASSED.get(group, ()))
        probes = cfg.get("probes")
        if isinstance(probes, DictConfig) and probes.get("enabled", True):
            _check_probe_entries(probes)
        for name, node in (cfg.get("callbacks") or {}).items():
            if (
                isinstance(node, DictConfig) and "_target_" in node
            ):  # `enabled` is the builder's, not the class's
                check_target(
                    OmegaConf.masked_copy(node, [k for k in node if k != "enabled"]), f"callbacks.{name}"
                )
        if isinstance(cfg.get("trainer"), DictConfig) and "max_steps" in cfg.mode:
            _check_trainer_arguments(cfg.trainer)


def _keys_under(key: str, given: list[str]) -> list[str]:
    """The keys directly below `key` among `given` (the dotted keys the command line set), in order."""
    return [g[len(key) + 1 :].split(".")[0] for g in given if g.startswith(f"{key}.")]


@contextlib.contextmanager
def as_a_job(composed: DictConfig):
    """Inside, Hydra's settings of the job to come (`composed` with them) are in place, its output dir a throwaway
    folder, so `${hydra:...}` values resolve as in the job."""
    from hydra.core.hydra_config import HydraConfig

    with tempfile.TemporaryDirectory() as folder:
        settings = composed.copy()
        with open_dict(settings):
            settings.hydra.runtime.output_dir = folder
            settings.hydra.job.num = 0
        HydraConfig.instance().set_config(settings)
        yield


def _joblib_pool(node: DictConfig) -> None:
    """hydra/launcher=parallel: build the joblib Parallel (loky) its plugin makes, and count its jobs."""
    import joblib

    arguments = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not k.startswith("_")}
    arguments["backend"] = "loky"
    joblib.Parallel(**arguments)
    joblib.effective_n_jobs(arguments.get("n_jobs"))  # where n_jobs=0 is refused, when the jobs start


def _submitit_executor(node: DictConfig) -> None:
    """hydra/launcher=local or slurm: build the submitit executor its plugin makes, in a throwaway folder."""
    import shutil

    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    params = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not k.startswith("_")}
    kind = "slurm" if str(node.get("_target_", "")).endswith("SlurmLauncher") else "local"
    if kind == "slurm" and shutil.which("srun") is None:
        return  # submitit builds a SLURM executor only where SLURM is: the cluster's login node tries it
    params.pop("submitit_folder", None)
    with tempfile.TemporaryDirectory() as folder:
        init = {"folder": folder}
        if "max_num_timeout" in params:
            init[f"{kind}_max_num_timeout"] = params.pop("max_num_timeout")
        executor = submitit.AutoExecutor(cluster=kind, **init)
        queue = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in queue else f"{kind}_{k}": v for k, v in params.items()})


def check_launcher(launcher: DictConfig, base: DictConfig | None, given: list[str]) -> None:
    """Build the sweep's launcher (the hydra.launcher node) as its plugin does; `base`: its config file's values,
    `given`: the hydra.launcher keys the command line set."""
    target = str(launcher.get("_target_", ""))
    if target.endswith("JoblibLauncher"):
        make = _joblib_pool
    elif "submitit" in target:
        make = _submitit_executor
    else:
        return
    from harness.config.build import refused

    order = _keys_under("hydra.launcher", given)
    with _libraries_quiet():
        try:
            make(launcher)
        except Exception as err:  # the launcher's library refuses a value
            raise refused(err, "hydra.launcher", launcher, base, order, attempt=make) from None
