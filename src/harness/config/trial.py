"""What a config builds, built once at the door with throwaway inputs: a value that a library refuses only when it
builds the object (an optimizer's lr=nan, Lightning's precision=13, a launcher's n_jobs=0, a data source's empty
alphabet) is one line naming the key before any work, not a traceback once the data is built.

Each part is built by the function the run builds it with: the data source (constructed, nothing generated or
read), the optimizer and schedule on a throwaway layer (and stepped once), the callbacks and the Trainer, and a
sweep's launcher as the launcher plugin builds its pool or executor. A refusal names the key that, set back to the
config file's value, makes it go away (harness.config.build.refused). This module imports torch and Lightning:
the door calls it after every cheap check, so a typo still costs well under a second."""

from __future__ import annotations

import contextlib
import logging
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from harness.config.build import build, refused
from harness.errors import ConfigError

#: the loggers Lightning talks through when it builds a Trainer (devices found, tips)
CHATTY = ("pytorch_lightning", "lightning_fabric", "lightning")
#: the Trainer keys that say where it runs: a job a cluster runs elsewhere is tried on this machine's CPU
WHERE = {"accelerator": "cpu", "devices": 1, "strategy": "auto", "num_nodes": 1}


@contextlib.contextmanager
def quiet():
    """Lightning's lines and any library's warnings held back while the door builds: the run says them."""
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


def built(key: str, node: DictConfig, base: DictConfig | None, order: list[str], make: Callable):
    """`make(node)`, or a ConfigError naming the key under `key` that a refusal comes from. A ConfigError that
    already names a key below `key` (a part's own rule) stands as it is."""
    try:
        return make(node)
    except ConfigError as err:
        if err.key != key:
            raise
        cause = err
    except Exception as err:  # any library's refusal of a value: the default config builds
        cause = err
    raise refused(cause, key, node, base, order, attempt=make) from None


def under(key: str, given: list[str]) -> list[str]:
    """The keys below `key` among the dotted keys the command line set, in its order, relative to `key`."""
    return [g[len(key) + 1 :].split(".")[0] for g in given if g.startswith(f"{key}.")]


def optimizer_and_schedule(cfg: DictConfig, base: DictConfig, given: list[str]) -> None:
    """The optimizer on a throwaway layer's parameter groups, stepped once, then the schedule on it, stepped once."""
    import torch

    from harness.train.optim import optimizer_and_schedule as made

    layer = torch.nn.Linear(2, 2)  # a matrix and a bias: both of harness's parameter groups
    for parameter in layer.parameters():
        parameter.grad = torch.zeros_like(parameter)

    def optimizer(node: DictConfig):
        made_one, _ = made(build(node, "optim"), None, layer, total_steps=cfg.mode.max_steps)
        made_one.step()
        return made_one

    stepped = built("optim", cfg.optim, base.get("optim"), under("optim", given), optimizer)
    if cfg.get("schedule") is None:
        return

    def schedule(node: DictConfig):
        _, scheduler = made(lambda groups: stepped, build(node, "schedule"), layer, cfg.mode.max_steps)
        scheduler.step()
        return scheduler

    built("schedule", cfg.schedule, base.get("schedule"), under("schedule", given), schedule)


def trainer(cfg: DictConfig, base: DictConfig, given: list[str], devices: bool) -> None:
    """The callbacks group's entries and Lightning's Trainer, with the arguments the run gives it; where a cluster
    runs the job (`devices` False) its accelerator, devices, strategy and nodes are not this machine's to try."""
    from harness.train.trainer import build_callbacks, build_trainer

    callbacks = build_callbacks(cfg)
    if not devices:
        cfg = cfg.copy()
        with open_dict(cfg):
            for name, value in WHERE.items():
                if name in cfg.trainer:
                    cfg.trainer[name] = value
    build_trainer(cfg, Path.cwd(), callbacks, [], base=base.get("trainer"), order=under("trainer", given))


def trial(cfg: DictConfig, base: DictConfig, given: list[str], devices: bool = True) -> None:
    """Build what the job config `cfg` builds (see the module docstring); `base`: the config composed with the same
    group choices and no values (the config files'), `given`: the dotted keys the command line set, in its order.
    Raises ConfigError naming the key a refusal comes from."""
    import pytorch_lightning  # noqa: F401  (first imported here, it would set its own loggers' levels inside quiet)

    with quiet():
        if cfg.get("data") is not None and cfg.mode.name != "eval":  # eval reads the checkpoint's own data
            built("data", cfg.data, base.get("data"), under("data", given), lambda node: build(node, "data"))
        if cfg.get("optim") is not None and "max_steps" in cfg.mode:
            optimizer_and_schedule(cfg, base, given)
        if cfg.get("trainer") is not None:
            trainer(cfg, base, given, devices)


def joblib_pool(node: DictConfig) -> None:
    """hydra/launcher=parallel: the joblib Parallel its plugin makes (loky, as the plugin forces), and its jobs."""
    import joblib

    arguments = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not k.startswith("_")}
    arguments["backend"] = "loky"
    joblib.Parallel(**arguments)
    joblib.effective_n_jobs(arguments.get("n_jobs"))  # where n_jobs=0 is refused, when the jobs start


def submitit_executor(node: DictConfig) -> None:
    """hydra/launcher=local or slurm: the submitit executor its plugin makes, with its parameters, in a
    throwaway folder (nothing is submitted)."""
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


def launcher_trial(launcher: DictConfig, base: DictConfig | None, given: list[str]) -> None:
    """The sweep's launcher (the composed hydra.launcher node), built as its plugin builds it; `base`: the same
    launcher's config file, `given`: the hydra.launcher keys the command line set."""
    target = str(launcher.get("_target_", ""))
    if target.endswith("JoblibLauncher"):
        make = joblib_pool
    elif "submitit" in target:
        make = submitit_executor
    else:
        return
    with quiet():
        built("hydra.launcher", launcher, base, under("hydra.launcher", given), make)
