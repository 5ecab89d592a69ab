"""What a config builds, built once at the door with throwaway inputs (`trial`, `launcher_trial`): a value a library
refuses only when building (lr=nan, precision=13, n_jobs=0) is one line naming the key before any work. Imports
torch and Lightning: the door calls it after every cheap check."""

# each part is built by the function the run builds it with: the data source (nothing generated), the optimizer
# and schedule on a throwaway layer, the loss, the probes, the model (on the meta device), the callbacks and the
# Trainer, a sweep's launcher as its plugin builds it

from __future__ import annotations

import contextlib
import logging
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from harness.config.build import build, key_at_fault, refused
from harness.errors import ConfigError

#: the loggers Lightning talks through when it builds a Trainer (devices found, tips)
CHATTY = ("pytorch_lightning", "lightning_fabric", "lightning")
#: the vocabulary a model is tried with at the door (the data's own is known only once the data is built)
PLACEHOLDER_VOCABULARY = 256
#: the Trainer keys that say where it runs: a job a cluster runs elsewhere is tried on this machine's CPU
WHERE = {"accelerator": "cpu", "devices": 1, "strategy": "auto", "num_nodes": 1}


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


def _is_own_rule(err: ConfigError, key: str) -> bool:
    """Whether `err` is a part's own rule naming a key below `key`, not a library's refusal that build() named."""
    return err.key != key and getattr(err, "library", None) is None


def _build_or_name_key(
    key: str, node: DictConfig, base: DictConfig | None, order: list[str], make: Callable, what=None
):
    """`make(node)`, or a ConfigError naming the key under `key` that a refusal comes from (a part's own rule's
    ConfigError stands as it is)."""
    try:
        return make(node)
    except ConfigError as err:
        if _is_own_rule(err, key):
            raise
        cause = err
    except Exception as err:  # any library's refusal of a value: the default config builds
        cause = err
    raise refused(cause, key, node, base, order, attempt=make, what=what) from None


def _keys_under(key: str, given: list[str]) -> list[str]:
    """The keys directly below `key` among `given` (the dotted keys the command line set), in order."""
    return [g[len(key) + 1 :].split(".")[0] for g in given if g.startswith(f"{key}.")]


def _try_optimizer_and_schedule(cfg: DictConfig, base: DictConfig, given: list[str]) -> None:
    """Build the optimizer on a throwaway layer's parameter groups, then the schedule, each stepped once."""
    import torch

    from harness.train.optim import optimizer_and_schedule

    layer = torch.nn.Linear(2, 2)  # a matrix and a bias: both of harness's parameter groups
    for parameter in layer.parameters():
        parameter.grad = torch.zeros_like(parameter)

    def optimizer(node: DictConfig):
        made, _ = optimizer_and_schedule(build(node, "optim"), None, layer, total_steps=cfg.mode.max_steps)
        made.step()
        return made

    stepped = _build_or_name_key(
        "optim", cfg.optim, base.get("optim"), _keys_under("optim", given), optimizer
    )
    if cfg.get("schedule") is None:
        return

    def schedule(node: DictConfig):
        _, scheduler = optimizer_and_schedule(
            lambda groups: stepped, build(node, "schedule"), layer, cfg.mode.max_steps
        )
        scheduler.step()
        return scheduler

    _build_or_name_key(
        "schedule", cfg.schedule, base.get("schedule"), _keys_under("schedule", given), schedule
    )


def _try_trainer(cfg: DictConfig, base: DictConfig, given: list[str], devices: bool) -> None:
    """Build the callbacks and the Trainer as the run does, then fit one step (one process only). `devices` False:
    the accelerator, devices and strategy are not this machine's to try."""
    from harness.train.distributed.devices import SHARDED, processes, strategy_name
    from harness.train.trainer import build_callbacks, build_trainer

    callbacks = build_callbacks(cfg)
    if not devices:
        cfg = cfg.copy()
        with open_dict(cfg):
            for name, value in WHERE.items():
                if name in cfg.trainer:
                    cfg.trainer[name] = value
    build_trainer(
        cfg, Path.cwd(), callbacks, [], base=base.get("trainer"), order=_keys_under("trainer", given)
    )
    # fitted here: one process, unsharded (a sharded strategy shards the module it fits: the harness's, at the run);
    # Lightning refuses some values (accumulate_grad_batches=0) only when it fits
    single_process = processes(cfg.trainer) == 1 and cfg.trainer.get("num_nodes", 1) == 1
    if single_process and strategy_name(cfg.trainer) not in SHARDED:
        _build_or_name_key(
            "trainer",
            cfg.trainer,
            base.get("trainer"),
            _keys_under("trainer", given),
            _fit_one_step,
            what="Lightning",
        )


def _fit_one_step(node: DictConfig) -> None:
    """Fit one step of a one-weight module through a Trainer of `node`'s arguments (less the harness's own), in a
    throwaway folder; the global torch switches a Trainer sets are put back."""
    import pytorch_lightning as pl
    import torch

    from harness.train.rules import OWNED
    from harness.train.trainer import given_arguments

    class OneWeight(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(1))

        def training_step(self, batch, batch_idx):
            return (self.weight * batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    arguments = {k: v for k, v in given_arguments(node).items() if k not in OWNED}
    switches = (torch.are_deterministic_algorithms_enabled(), torch.is_anomaly_enabled())
    benchmark = torch.backends.cudnn.benchmark
    try:
        with tempfile.TemporaryDirectory() as folder:
            one = pl.Trainer(
                **arguments,
                max_steps=1,
                logger=False,
                callbacks=[],
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                default_root_dir=folder,
            )
            one.fit(OneWeight(), train_dataloaders=torch.utils.data.DataLoader(torch.ones(2, 1)))
    finally:
        torch.use_deterministic_algorithms(switches[0])
        torch.set_anomaly_enabled(switches[1])
        torch.backends.cudnn.benchmark = benchmark


def _try_model_loss_probes(cfg: DictConfig, base: DictConfig, given: list[str]) -> None:
    """Build the loss, the probes and the model (on the meta device, with a placeholder vocabulary). A model refusal
    is raised only where a key the command line set is why; others are left to the run."""
    import torch

    from harness.ops.loss import loss_of
    from harness.train.distributed.sharding import check_init_weights, on_meta

    def loss(node: DictConfig):
        whole = cfg.copy()
        with open_dict(whole):
            whole.loss = node
        return loss_of(whole)

    if cfg.get("loss") is not None:
        _build_or_name_key("loss", cfg.loss, base.get("loss"), _keys_under("loss", given), loss)
    if cfg.get("probes") is not None:
        overfit = cfg.mode.name == "overfit"

        def probes(node: DictConfig):
            return build(node, "probes", run_dir=None, data=None, overfit=overfit, loss=None)

        _build_or_name_key("probes", cfg.probes, base.get("probes"), _keys_under("probes", given), probes)

    def model(node: DictConfig):
        with torch.device("meta"):
            return build(node, "model", vocab_size=PLACEHOLDER_VOCABULARY)

    try:
        made = model(cfg.model)
    except Exception as err:
        order = _keys_under("model", given)
        if key_at_fault(cfg.model, base.get("model"), order, model) is None:
            return
        if isinstance(err, ConfigError) and _is_own_rule(
            err, "model"
        ):  # the model's own rule, in its own words
            raise
        raise refused(err, "model", cfg.model, base.get("model"), order, attempt=model) from None
    if on_meta(cfg):  # its weights will come from its own init_weights() once sharded
        check_init_weights(made)


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


def trial(cfg: DictConfig, base: DictConfig, given: list[str], devices: bool = True) -> None:
    """Build what the job config `cfg` builds; raise a ConfigError naming the key a refusal comes from. `base`: the
    config files' values (same group choices), `given`: the dotted keys the command line set, in order."""
    from harness.compat import import_lightning

    import_lightning()  # first imported here, it would set its own loggers' levels inside libraries_quiet()
    import torch

    threads = torch.get_num_threads()  # tiny throwaway tensors: a pool of threads started here spins on
    torch.set_num_threads(1)
    try:
        with _libraries_quiet():
            _trial_parts(cfg, base, given, devices)
    finally:
        torch.set_num_threads(threads)


def _trial_parts(cfg: DictConfig, base: DictConfig, given: list[str], devices: bool) -> None:
    """trial()'s builds, in the order the run builds them."""
    if cfg.get("data") is not None and cfg.mode.name != "eval":  # eval reads the checkpoint's own data
        _build_or_name_key(
            "data", cfg.data, base.get("data"), _keys_under("data", given), lambda node: build(node, "data")
        )
    if "max_steps" not in cfg.mode:  # mode=eval: no optimizer, no Trainer; its model is the checkpoint's
        return
    if cfg.get("optim") is not None:
        _try_optimizer_and_schedule(cfg, base, given)
        if cfg.get("model") is not None:
            _try_model_loss_probes(cfg, base, given)
    if cfg.get("trainer") is not None:
        _try_trainer(cfg, base, given, devices)


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


def launcher_trial(launcher: DictConfig, base: DictConfig | None, given: list[str]) -> None:
    """Build the sweep's launcher (the hydra.launcher node) as its plugin does; `base`: its config file's values,
    `given`: the hydra.launcher keys the command line set."""
    target = str(launcher.get("_target_", ""))
    if target.endswith("JoblibLauncher"):
        make = _joblib_pool
    elif "submitit" in target:
        make = _submitit_executor
    else:
        return
    with _libraries_quiet():
        _build_or_name_key("hydra.launcher", launcher, base, _keys_under("hydra.launcher", given), make)
