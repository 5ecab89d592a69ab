"""The training keys' rules, checked at the door before anything is built: RANGES, `check(cfg)`, and OWNED,
the Trainer arguments the harness sets. No torch or Lightning at import."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlparse

from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError

#: the training parts' keys with a range: key -> (smallest, whole number?, why). Checked wherever the key is set.
RANGES = {
    "optim.lr": (0.0, False, "the peak learning rate, 0: no learning (try optim.lr=3e-3)"),
    "optim.weight_decay": (0.0, False, "must be >= 0 (try optim.weight_decay=0.0)"),
    "optim.momentum": (0.0, False, "must be >= 0 (try optim.momentum=0.9)"),
    "trainer.num_nodes": (1, True, "machines (try trainer.num_nodes=1)"),
    "trainer.gradient_clip_val": (0.0, False, "must be >= 0, or null for no clipping (try 1.0)"),
    "mode.max_steps": (1, True, "the step budget (try mode.max_steps=500)"),
    "mode.val_every": (1, True, "steps between validations (try mode.val_every=100)"),
    "mode.log_every": (1, True, "steps between logged rows (try mode.log_every=1)"),
    "mode.ckpt_every": (1, True, "steps between periodic checkpoints in mode=full (try mode.ckpt_every=100)"),
    "watchdog.beat_s": (0.05, False, "seconds between a rank's heartbeats (try watchdog.beat_s=1)"),
    "watchdog.silent_s": (0.1, False, "seconds of no heartbeat that name a rank stopped (try 10)"),
    "watchdog.stall_s": (0.1, False, "seconds of no step on any rank that make a stall (try 300)"),
    "mode.target_loss": (
        0.0,
        False,
        "the loss above the floor that counts as memorized (try mode.target_loss=0.02)",
    ),
}

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


#: the shapes of harness.train.optim.schedule, and the name its _target_ goes by
SHAPES = ("constant", "cosine", "linear")
SCHEDULES = ("harness.train.optim.schedule",)


def check_schedule(shape, warmup_steps, min_lr, peak: float) -> None:
    """harness.train.optim.schedule's arguments, checked at the door and when the schedule is built."""
    if shape not in SHAPES:
        raise ConfigError("schedule.shape", shape, f"choose one of {', '.join(SHAPES)}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ConfigError("schedule.warmup_steps", warmup_steps, "must be a whole number >= 0 (try 100)")
    if min_lr is not None and not 0 <= min_lr <= peak:
        raise ConfigError("schedule.min_lr", min_lr, f"must lie between 0 and optim.lr={peak}, or null")


#: logger.wandb.mode's choices (harness.train.loggers.wandb_logger sets WANDB_MODE from it)
WANDB_MODES = ("offline", "online", "disabled")


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
    """logger.wandb.mode is a choice; `online` needs an API key and a reachable server (else wandb fails
    late)."""
    node = (cfg.get("logger") or {}).get("wandb")
    if not isinstance(node, DictConfig):
        return
    mode = node.get("mode")
    if mode not in WANDB_MODES:
        raise ConfigError("logger.wandb.mode", mode, f"choose one of {', '.join(WANDB_MODES)}")
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
    """The training parts' rules for a composed config (harness.tasks.validate checks RANGES)."""
    schedule = cfg.get("schedule")
    if schedule is not None and schedule.get("_target_") in SCHEDULES:
        peak = (cfg.get("optim") or {}).get("lr", 0.0)
        check_schedule(schedule.get("shape"), schedule.get("warmup_steps"), schedule.get("min_lr"), peak)
    _check_wandb(cfg)
    _check_trainer(cfg)
    _check_compile(cfg.compile)
    _check_watchdog(cfg.get("watchdog"))


def _check_watchdog(watchdog) -> None:
    """A rank is silent only after three missed beats, and a stall lasts at least that long."""
    if watchdog is None:
        return
    if watchdog.silent_s < 3 * watchdog.beat_s:
        raise ConfigError(
            "watchdog.silent_s",
            watchdog.silent_s,
            f"must be at least 3 beats (watchdog.beat_s={watchdog.beat_s}): a rank is silent once it missed three",
        )
    if watchdog.stall_s < watchdog.silent_s:
        raise ConfigError(
            "watchdog.stall_s",
            watchdog.stall_s,
            f"must be at least watchdog.silent_s={watchdog.silent_s}: a stalled rank is named after both",
        )
