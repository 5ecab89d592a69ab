"""Checkpoints: which one `ckpt_path` names, whether it may resume this run (mode, shapes, optimizer),
`ResumeState` for a bit-for-bit resume, and `FinalCheckpoint` for the final weights."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch

from harness.compat import validate_on_restart, validation_due
from harness.report.verdict import STOPPED, status_in, verdict_in
from harness.seeding import rng_state, set_rng_state

log = logging.getLogger(__name__)


def find_checkpoint(ckpt_path: str, run_dir: Path, log_dir) -> str:
    """`ckpt_path`, or for `last` the newest runs/<date>/<time>/checkpoints/last.ckpt under `log_dir`."""
    from harness.errors import ConfigError

    if ckpt_path != "last":
        return ckpt_path
    runs = Path(log_dir).absolute() / "runs"
    found = sorted(runs.glob("*/*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
    found = [p for p in found if Path(run_dir).absolute() not in p.absolute().parents]
    if not found:
        raise ConfigError(
            "ckpt_path",
            "last",
            f"no run under {runs} (paths.log_dir/runs/<date>/<time>, where ckpt_path=last looks) has "
            "checkpoints/last.ckpt; give a checkpoint's path, or paths.log_dir where the runs are",
        )
    log.info("checkpoint: %s", found[-1])
    return str(found[-1])


def _checkpoint_origin(ckpt_path: str) -> tuple[Path, str | None]:
    """The run dir a checkpoint was saved in and that run's mode (None where neither says)."""
    from omegaconf import OmegaConf

    run = Path(ckpt_path).absolute().parent.parent
    config = run / ".hydra" / "config.yaml"
    try:
        if config.is_file():
            return run, str(OmegaConf.select(OmegaConf.load(config), "mode.name", default=None) or "") or None
    except Exception:  # an unreadable neighbour says nothing about the checkpoint: its mode is unknown
        return run, None
    verdict, _ = verdict_in(run)
    return run, (verdict or {}).get("mode")


def check_resume_mode(cfg, run_dir: Path) -> str | None:
    """The checkpoint mode=full resumes from, refused if another mode saved it; None outside a resume."""
    from harness.errors import ConfigError

    if cfg.ckpt_path is None or cfg.mode.name != "full":
        return None
    found = find_checkpoint(cfg.ckpt_path, run_dir, cfg.paths.log_dir)
    origin, mode = _checkpoint_origin(found)
    if mode is not None and mode != cfg.mode.name and cfg.get("resume_any_mode", False) is not True:
        raise ConfigError(
            "ckpt_path",
            cfg.ckpt_path,
            f"{found} was saved by a mode={mode} run ({origin}), and this run is mode={cfg.mode.name}; give "
            f"a mode={cfg.mode.name} run's checkpoint, or +resume_any_mode=true to resume from it all the same",
        )
    log.info("resuming from %s: the mode=%s run in %s", found, mode or "unknown", origin)
    return found


def interrupted_here(run_dir: Path) -> str | None:
    """`run_dir`'s own last.ckpt where its verdict says the run stopped part-way; else None."""
    last = run_dir / "checkpoints" / "last.ckpt"
    return str(last) if last.is_file() and status_in(run_dir) in STOPPED else None


def read_checkpoint(ckpt_path: str) -> dict:
    """The checkpoint loaded weights-only (it cannot run code); a ConfigError where it is not a readable one."""
    from harness.errors import ConfigError

    if Path(ckpt_path).is_dir():  # trainer=fsdp with save_distributed_checkpoint=true: one file a rank
        raise ConfigError(
            "ckpt_path",
            ckpt_path,
            "is a sharded checkpoint (a folder, one file a rank); the harness reads one file: "
            f"python -m lightning_fabric.utilities.consolidate_checkpoint {ckpt_path} writes "
            f"{ckpt_path}.consolidated, which mode=eval reads; to resume, train with "
            "trainer.strategy.save_distributed_checkpoint=false",
        )
    try:
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True)
        if not isinstance(checkpoint.get("state_dict"), dict):
            raise TypeError("no state_dict")
    except Exception as err:
        raise ConfigError(
            "ckpt_path", ckpt_path, f"not a readable Lightning checkpoint ({type(err).__name__})"
        ) from None
    return checkpoint


def load_checked(ckpt_path: str, ours: dict, fix: str, checkpoint: dict | None = None) -> dict:
    """The checkpoint's state_dict, refused naming the first tensor whose name or shape differs from `ours`."""
    from harness.errors import ConfigError

    state = (checkpoint or read_checkpoint(ckpt_path))["state_dict"]
    for key in sorted(set(ours) | set(state)):
        if key not in ours or key not in state or ours[key].shape != state[key].shape:
            theirs = tuple(state[key].shape) if key in state else "missing"
            mine = tuple(ours[key].shape) if key in ours else "missing"
            raise ConfigError(
                "ckpt_path",
                ckpt_path,
                f"belongs to another model shape: {key} is {theirs} there, {mine} here; {fix}",
            )
    return state


def _check_optimizer(ckpt_path: str, checkpoint: dict, optimizer, scheduler) -> None:
    """Refuse a checkpoint whose optimizer or schedule state is not the kind this run builds."""
    from harness.errors import ConfigError

    saved = checkpoint.get("optimizer_states") or []
    groups = [set(g) - {"params"} for g in (saved[0]["param_groups"] if saved else [])]
    ours = [set(g) - {"params"} for g in optimizer.param_groups]
    if len(groups) != len(ours) or any(mine - theirs for mine, theirs in zip(ours, groups, strict=False)):
        raise ConfigError(
            "ckpt_path",
            ckpt_path,
            f"was saved with another optimizer (its settings: {', '.join(sorted(set().union(*groups)))}), "
            f"and {type(optimizer).__name__} needs {', '.join(sorted(set().union(*ours)))}; resume with the "
            "optim it was trained with (its run's .hydra/config.yaml says which)",
        )
    schedules = checkpoint.get("lr_schedulers") or []
    if len(schedules) != (scheduler is not None) or (
        scheduler is not None and set(schedules[0]) != set(scheduler.state_dict())
    ):
        raise ConfigError(
            "ckpt_path",
            ckpt_path,
            "was saved with another learning-rate schedule (or none, or one where this run has none); resume "
            "with the schedule it was trained with (its run's .hydra/config.yaml says which)",
        )


@dataclass(frozen=True)
class Resumed:
    """The checkpoint a run resumes from: path, step, validation owed, saved in this run's own dir."""

    path: str
    step: int
    owed: bool
    here: bool


def resumption(ckpt_path: str | None, run_dir: Path, module, log_dir) -> Resumed | None:
    """The checkpoint to resume from, checked against `module`'s shapes, optimizer and schedule; None without
    one."""
    if ckpt_path is None:
        return None
    path = find_checkpoint(ckpt_path, run_dir, log_dir)
    checkpoint = read_checkpoint(path)
    load_checked(path, module.state_dict(), "resume with the config it was trained with", checkpoint)
    made = module.configure_optimizers()
    if isinstance(made, dict):
        _check_optimizer(path, checkpoint, made["optimizer"], made["lr_scheduler"]["scheduler"])
    else:
        _check_optimizer(path, checkpoint, made, None)
    kept = checkpoint.get("harness") or {}
    here = Path(run_dir).absolute() in Path(path).absolute().parents
    return Resumed(path, int(checkpoint.get("global_step", 0)), bool(kept.get("validation_owed")), here)


class FinalCheckpoint(pl.Callback):
    """Saves `path` at the end of the last step where the periodic checkpoint (every `every` steps) did not."""

    def __init__(self, path: Path, every: int):
        self.path, self.every = path, every

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.fast_dev_run:  # debug=fdr saves nothing, as Lightning's own ModelCheckpoint
            return
        if trainer.global_step >= trainer.max_steps and trainer.global_step % self.every:
            trainer.save_checkpoint(self.path)


class ResumeState(pl.Callback):
    """Puts into every checkpoint what a bit-for-bit resume needs beyond Lightning's own state."""

    def __init__(self):
        self.owed = False  # the validation due at this step's end has not ended yet
        self.before_validation = None  # the random generators as the step ended, before the validation
        self.validate_after_fit = False  # resumed at the last step with its validation owed: run after fit

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loader = trainer.train_dataloader
        if hasattr(loader, "trained"):
            loader.trained = (trainer.current_epoch, batch_idx + 1)
        self.owed = validation_due(trainer)

    def on_validation_start(self, trainer, pl_module) -> None:
        self.before_validation = rng_state() if self.owed else None

    def on_validation_end(self, trainer, pl_module) -> None:
        self.owed, self.before_validation = False, None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        # generators, loader position, last loss and lr, validation metrics, a validation owed
        checkpoint["rng"] = self.before_validation or rng_state()
        checkpoint["harness"] = {
            "final_loss": pl_module.final_loss(),
            "step_lr": pl_module.step_lr,
            "metrics": {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")},
            "validation_owed": self.owed,
        }

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        if checkpoint.get("rng") is not None:
            set_rng_state(checkpoint["rng"])
        kept = checkpoint.get("harness") or {}
        if kept.get("final_loss") is not None:
            pl_module.last_loss = torch.tensor(kept["final_loss"])
        pl_module.step_lr, pl_module.resumed_metrics = kept.get("step_lr"), kept.get("metrics") or {}
        if kept.get("validation_owed"):
            if checkpoint["global_step"] < trainer.max_steps:
                validate_on_restart(checkpoint)
            else:  # Lightning does nothing at all when resumed at max_steps (it would skip the validation)
                self.validate_after_fit = True
