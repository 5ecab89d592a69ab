"""Checkpoints: which one `ckpt_path` names (`last` found), whether it may resume this run (its mode, its model's
shapes, loaded weights-only), and what a bit-for-bit resume needs beyond Lightning's own state (the random
generators, the train loader's position), saved at every checkpoint; the final weights always saved."""

from __future__ import annotations

import logging
from pathlib import Path

import pytorch_lightning as pl
import torch

from harness.seeding import rng_state, set_rng_state

log = logging.getLogger(__name__)


def find_checkpoint(ckpt_path: str, run_dir: Path) -> str:
    """`ckpt_path` itself, or for `last` the newest checkpoints/last.ckpt of an earlier run under the same
    outputs folder as `run_dir` (outputs/runs/<date>/<time>)."""
    from harness.errors import ConfigError

    if ckpt_path != "last":
        return ckpt_path
    runs = run_dir.parent.parent
    found = sorted(runs.glob("*/*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
    found = [p for p in found if run_dir not in p.parents]
    if not found:
        raise ConfigError(
            "ckpt_path",
            "last",
            f"no earlier run under {runs} has checkpoints/last.ckpt; give a checkpoint's path",
        )
    log.info("checkpoint: %s", found[-1])
    return str(found[-1])


def checkpoint_origin(ckpt_path: str) -> tuple[Path, str | None]:
    """The run dir a checkpoint was saved in (<run dir>/checkpoints/<name>.ckpt) and that run's mode, read from
    its .hydra/config.yaml or verdict.json; None where neither says (a checkpoint copied out of its run)."""
    import json

    from omegaconf import OmegaConf

    run = Path(ckpt_path).absolute().parent.parent
    config, verdict = run / ".hydra" / "config.yaml", run / "verdict.json"
    try:
        if config.is_file():
            return run, str(OmegaConf.select(OmegaConf.load(config), "mode.name", default=None) or "") or None
        if verdict.is_file():
            return run, json.loads(verdict.read_text(encoding="utf-8")).get("mode")
    except Exception:  # an unreadable neighbour says nothing about the checkpoint: its mode is unknown
        return run, None
    return run, None


def check_resume_mode(cfg, run_dir: Path) -> str | None:
    """The checkpoint mode=full resumes from (ckpt_path, `last` found), refused in one line when another mode's run
    saved it (an overfit run's last.ckpt is the newest after an overfit run) unless +resume_any_mode=true, and
    named on the console with its run and mode; None without ckpt_path or outside mode=full."""
    from harness.errors import ConfigError

    if cfg.ckpt_path is None or cfg.mode.name != "full":
        return None
    found = find_checkpoint(cfg.ckpt_path, run_dir)
    origin, mode = checkpoint_origin(found)
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
    """checkpoints/last.ckpt of `run_dir` itself when its verdict.json says INTERRUPTED: the job is running again
    in the dir it was stopped in (the submitit launcher requeues a job stopped at SLURM's time limit into the
    same job dir, or a user reruns with hydra.run.dir=<that dir>), so it continues from there; else None."""
    import json

    last, verdict = run_dir / "checkpoints" / "last.ckpt", run_dir / "verdict.json"
    if not (last.is_file() and verdict.is_file()):
        return None
    try:
        status = json.loads(verdict.read_text()).get("status")
    except (ValueError, UnicodeDecodeError):
        return None
    return str(last) if status == "INTERRUPTED" else None


def load_checked(ckpt_path: str, ours: dict, fix: str) -> dict:
    """The checkpoint's state_dict, loaded weights-only (a checkpoint cannot run code), refused in one line
    naming the first tensor whose name or shape differs from `ours` (a state_dict); `fix` ends the line."""
    from harness.errors import ConfigError

    try:
        state = torch.load(ckpt_path, map_location="cpu", weights_only=True)["state_dict"]
    except Exception as err:
        raise ConfigError(
            "ckpt_path", ckpt_path, f"not a readable Lightning checkpoint ({type(err).__name__})"
        ) from None
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


class FinalCheckpoint(pl.Callback):
    """Saves `path` at the end of the run's last step when the periodic checkpoint (every `every` steps) did
    not: the final weights are always there, saved at the same point of a step as the periodic ones, so they
    resume the same way (bit for bit)."""

    def __init__(self, path: Path, every: int):
        self.path, self.every = path, every

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.fast_dev_run:  # debug=fdr saves nothing, as Lightning's own ModelCheckpoint
            return
        if trainer.global_step >= trainer.max_steps and trainer.global_step % self.every:
            trainer.save_checkpoint(self.path)


class ResumeState(pl.Callback):
    """Puts into every checkpoint what a bit-for-bit resume needs beyond Lightning's own state: the
    random generators, and the train loader's position (see harness.data.sampler)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loader = trainer.train_dataloader
        if hasattr(loader, "trained"):
            loader.trained = (trainer.current_epoch, batch_idx + 1)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint["rng"] = rng_state()

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        if checkpoint.get("rng") is not None:
            set_rng_state(checkpoint["rng"])
