"""The Trainer's arguments the harness sets itself (OWNED, `harness_trainer_args`) and the trainer keys it refuses for
them; `check(cfg)`, the door's rules of the trainer, wandb online and compile that no declaration can say (what this
machine and network allow). No torch or Lightning at import."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlparse

from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError

#: the Trainer arguments the harness sets from its own keys: name -> (its value, from `run`: cfg, run_dir,
#: callbacks, loggers; what to set instead). harness.train.trainer.build_trainer sets exactly these, and
#: trainer.NAME for any of them is refused at the door (it would clash: Lightning's "multiple values" TypeError).
OWNED = {
    "max_steps": (lambda run: run.cfg.mode.max_steps, "use mode.max_steps"),
    "max_epochs": (lambda run: -1, "the harness counts steps, not epochs; use mode.max_steps"),
    "val_check_interval": (
        lambda run: run.cfg.mode.val_every,
        "use mode.val_every (steps between validations)",
    ),
    "check_val_every_n_epoch": (lambda run: None, "the harness validates by steps; use mode.val_every"),
    "log_every_n_steps": (lambda run: run.cfg.mode.log_every, "use mode.log_every"),
    "enable_progress_bar": (
        lambda run: run.cfg.mode.progress_bar,
        "use mode.progress_bar (callbacks=rich for Rich's bar)",
    ),
    "enable_checkpointing": (
        lambda run: run.cfg.mode.name == "full",
        "the mode decides: mode=full saves checkpoints (mode.ckpt_every), overfit mode its final weights",
    ),
    # overfit mode: every DDP rank trains on the same n examples (the run is the one-process run, its gradients
    # all-reduced); full mode: each rank reads its own share of the data
    "use_distributed_sampler": (
        lambda run: run.cfg.mode.name != "overfit",
        "the mode decides: overfit gives every rank the same n examples, mode=full each rank its share",
    ),
    "default_root_dir": (lambda run: run.run_dir, "the run dir is hydra.run.dir (under paths.log_dir)"),
    "callbacks": (
        lambda run: run.callbacks,
        "add one to the callbacks group (+callbacks.NAME._target_=...) or under probes.extra",
    ),
    "logger": (
        lambda run: run.loggers,
        "choose logger=csv|tensorboard|wandb (metrics.csv is always written)",
    ),
}
#: Trainer arguments refused though the harness does not set them: the harness has its own way
REFUSED = {"overfit_batches": "use mode=overfit n=... (memorize n examples, judged PASS/FAIL)"}
#: every Trainer argument refused under trainer., with what to set instead: derived from the two tables above
TRAINER_KEYS = {**{name: fix for name, (_, fix) in OWNED.items()}, **REFUSED}


def harness_trainer_args(cfg: DictConfig, run_dir: Path, callbacks: list, loggers: list) -> dict:
    """OWNED's Trainer arguments with this run's values."""
    run = SimpleNamespace(cfg=cfg, run_dir=run_dir, callbacks=callbacks, loggers=loggers)
    return {name: value(run) for name, (value, _) in OWNED.items()}


def _check_trainer(cfg: DictConfig) -> None:
    """No trainer key the harness sets or refuses; fast_dev_run only as debug=fdr (reported as DEBUG)."""
    given = OmegaConf.to_container(cfg.trainer)  # unresolved: the value as the user wrote it
    for key, fix in TRAINER_KEYS.items():
        if key in given:
            raise ConfigError(f"trainer.{key}", given[key], f"harness sets it; {fix}")
    debug_judges = (cfg.get("debug") or {}).get("judge", True)
    if given.get("fast_dev_run") and debug_judges:
        raise ConfigError(
            "trainer.fast_dev_run",
            given["fast_dev_run"],
            "use debug=fdr: the same one-batch run, reported as status DEBUG instead of judged",
        )


def _check_compile(value) -> None:
    """compile: false, true (torch.compile's default backend) or a torch.compile backend's name."""
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


#: seconds to wait for wandb's server before refusing mode=online (wandb itself waits 90 s)
REACH_SECONDS = 5.0


def _wandb_key(host: str) -> bool:
    """Whether wandb has an API key for `host`: WANDB_API_KEY, or a netrc entry (`wandb login` writes one)."""
    import netrc

    if os.environ.get("WANDB_API_KEY"):
        return True
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        return path.is_file() and netrc.netrc(str(path)).authenticators(host) is not None
    except (netrc.NetrcParseError, OSError):
        return False


def _check_wandb(cfg: DictConfig) -> None:
    """logger.wandb.mode=online needs an API key and a reachable server (else wandb fails late); its choices are
    declared (harness.config.groups.trainer.Wandb)."""
    node = (cfg.get("logger") or {}).get("wandb")
    if not isinstance(node, DictConfig):
        return
    mode = node.get("mode")
    if mode != "online":
        return
    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    host = url.hostname or "api.wandb.ai"
    fix = "or log offline with logger.wandb.mode=offline and upload later with `wandb sync <run dir>/wandb`"
    if not _wandb_key(host):
        raise ConfigError(
            "logger.wandb.mode",
            mode,
            f"no wandb API key for {host} (neither WANDB_API_KEY nor a netrc entry); run `wandb login`, {fix}",
        )
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=REACH_SECONDS).close()
    except OSError as err:
        raise ConfigError(
            "logger.wandb.mode",
            mode,
            f"cannot reach {host}:{port} ({err.strerror or type(err).__name__}); check the network, {fix}",
        ) from None


def check(cfg: DictConfig) -> None:
    """The trainer's, wandb's and compile's rules for a composed config, beside their declarations'."""
    _check_wandb(cfg)
    _check_trainer(cfg)
    _check_compile(cfg.compile)
