"""What a config builds, built once at the door with throwaway inputs: a value that a library refuses only when it
builds the object (an optimizer's lr=nan, Lightning's precision=13, a launcher's n_jobs=0, a data source's empty
alphabet, a model's dropout=2) is one line naming the key before any work, not a traceback once the data is built.

Each part is built by the function the run builds it with: the data source (constructed, nothing generated or
read), the optimizer and schedule on a throwaway layer (and stepped once), the loss, the probes, the model (on the
meta device), the callbacks and the Trainer, and a sweep's launcher as the launcher plugin builds its pool or
executor. A refusal names the key that, set back to the
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

from harness.config.build import build, culprit, refused
from harness.errors import ConfigError

#: the loggers Lightning talks through when it builds a Trainer (devices found, tips)
CHATTY = ("pytorch_lightning", "lightning_fabric", "lightning")
#: the vocabulary a model is tried with at the door (the data's own is known only once the data is built)
PLACEHOLDER_VOCABULARY = 256
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


def own_rule(err: ConfigError, key: str) -> bool:
    """Whether `err` is a part's own rule naming a key below `key`, in its own words, rather than a library's
    refusal that build() named from the library's words alone (which the config file's values name better)."""
    return err.key != key and getattr(err, "library", None) is None


def built(key: str, node: DictConfig, base: DictConfig | None, order: list[str], make: Callable, what=None):
    """`make(node)`, or a ConfigError naming the key under `key` that a refusal comes from. A part's own rule's
    ConfigError (own_rule) stands as it is."""
    try:
        return make(node)
    except ConfigError as err:
        if own_rule(err, key):
            raise
        cause = err
    except Exception as err:  # any library's refusal of a value: the default config builds
        cause = err
    raise refused(cause, key, node, base, order, attempt=make, what=what) from None


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
    """The callbacks group's entries and Lightning's Trainer, with the arguments the run gives it, then one step of
    a one-weight module through a Trainer of the same given arguments (Lightning refuses some, as
    accumulate_grad_batches=0, only when it fits). Where a cluster runs the job (`devices` False) its accelerator,
    devices, strategy and nodes are not this machine's to try; a run of several processes is not fitted here."""
    from harness.train.distributed.devices import SHARDED, processes, strategy_name
    from harness.train.trainer import build_callbacks, build_trainer

    callbacks = build_callbacks(cfg)
    if not devices:
        cfg = cfg.copy()
        with open_dict(cfg):
            for name, value in WHERE.items():
                if name in cfg.trainer:
                    cfg.trainer[name] = value
    build_trainer(cfg, Path.cwd(), callbacks, [], base=base.get("trainer"), order=under("trainer", given))
    # fitted here: one process, unsharded (a sharded strategy shards the module it fits: the harness's, at the run)
    alone = processes(cfg.trainer) == 1 and cfg.trainer.get("num_nodes", 1) == 1
    if alone and strategy_name(cfg.trainer) not in SHARDED:
        built(
            "trainer", cfg.trainer, base.get("trainer"), under("trainer", given), one_step, what="Lightning"
        )


def one_step(node: DictConfig) -> None:
    """Fit one step of a one-weight module on one example through a Trainer of `node`'s arguments (the harness's own
    left out: no callbacks, no logger, one step), in a throwaway folder; torch's global switches that a Trainer
    sets (deterministic algorithms, anomaly detection, cuDNN's benchmark) put back as they were."""
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


def _model_loss_probes(cfg: DictConfig, base: DictConfig, given: list[str]) -> None:
    """The loss, the probes (their arguments: nothing is measured) and the model, on the meta device (no memory, no
    time: a GPT-2 costs nothing) with a placeholder vocabulary, the data's being unknown before it is built. A
    model refusal is reported only where a key the command line set is why: one its placeholder vocabulary or the
    meta device alone is refused for is left to the run."""
    import torch

    from harness.ops.loss import loss_of
    from harness.train.distributed.sharding import check_init_weights, on_meta

    def loss(node: DictConfig):
        whole = cfg.copy()
        with open_dict(whole):
            whole.loss = node
        return loss_of(whole)

    if cfg.get("loss") is not None:
        built("loss", cfg.loss, base.get("loss"), under("loss", given), loss)
    if cfg.get("probes") is not None:
        overfit = cfg.mode.name == "overfit"

        def probes(node: DictConfig):
            return build(node, "probes", run_dir=None, data=None, overfit=overfit, loss=None)

        built("probes", cfg.probes, base.get("probes"), under("probes", given), probes)

    def model(node: DictConfig):
        with torch.device("meta"):
            return build(node, "model", vocab_size=PLACEHOLDER_VOCABULARY)

    try:
        made = model(cfg.model)
    except Exception as err:
        order = under("model", given)
        if culprit(cfg.model, base.get("model"), order, model) is None:
            return
        if isinstance(err, ConfigError) and own_rule(err, "model"):  # the model's own rule, in its own words
            raise
        raise refused(err, "model", cfg.model, base.get("model"), order, attempt=model) from None
    if on_meta(cfg):  # its weights will come from its own init_weights() once sharded
        check_init_weights(made)


@contextlib.contextmanager
def as_a_job(composed: DictConfig):
    """Hydra's settings of the job to come (`composed`: a config composed with them) in place while the door builds,
    with a throwaway folder as its output dir: a value that reads them (`${hydra:runtime.output_dir}`, as
    paths.output_dir and the profiler's dirpath do) resolves as in the job. Hydra sets its own when the job starts."""
    from hydra.core.hydra_config import HydraConfig

    with tempfile.TemporaryDirectory() as folder:
        settings = composed.copy()
        with open_dict(settings):
            settings.hydra.runtime.output_dir = folder
            settings.hydra.job.num = 0
        HydraConfig.instance().set_config(settings)
        yield


def trial(cfg: DictConfig, base: DictConfig, given: list[str], devices: bool = True) -> None:
    """Build what the job config `cfg` builds (see the module docstring); `base`: the config composed with the same
    group choices and no values (the config files'), `given`: the dotted keys the command line set, in its order.
    Raises ConfigError naming the key a refusal comes from."""
    from harness.compat import import_lightning

    import_lightning()  # first imported here, it would set its own loggers' levels inside quiet()
    import torch

    threads = torch.get_num_threads()  # tiny throwaway tensors: a pool of threads started here spins on
    torch.set_num_threads(1)
    try:
        with quiet():
            _trial_parts(cfg, base, given, devices)
    finally:
        torch.set_num_threads(threads)


def _trial_parts(cfg: DictConfig, base: DictConfig, given: list[str], devices: bool) -> None:
    """trial()'s builds, part by part, in the order the run builds them."""
    if cfg.get("data") is not None and cfg.mode.name != "eval":  # eval reads the checkpoint's own data
        built("data", cfg.data, base.get("data"), under("data", given), lambda node: build(node, "data"))
    if "max_steps" not in cfg.mode:  # mode=eval: no optimizer, no Trainer; its model is the checkpoint's
        return
    if cfg.get("optim") is not None:
        optimizer_and_schedule(cfg, base, given)
        if cfg.get("model") is not None:
            _model_loss_probes(cfg, base, given)
    if cfg.get("trainer") is not None:
        trainer(cfg, base, given, devices)


def _joblib_pool(node: DictConfig) -> None:
    """hydra/launcher=parallel: the joblib Parallel its plugin makes (loky, as the plugin forces), and its jobs."""
    import joblib

    arguments = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not k.startswith("_")}
    arguments["backend"] = "loky"
    joblib.Parallel(**arguments)
    joblib.effective_n_jobs(arguments.get("n_jobs"))  # where n_jobs=0 is refused, when the jobs start


def _submitit_executor(node: DictConfig) -> None:
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
        make = _joblib_pool
    elif "submitit" in target:
        make = _submitit_executor
    else:
        return
    with quiet():
        built("hydra.launcher", launcher, base, under("hydra.launcher", given), make)
