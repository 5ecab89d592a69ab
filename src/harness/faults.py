"""What keeps a run's work safe: non-finite values stop it at the step they appear, a signal stops it
after the current step with a checkpoint, and a checkpoint resumes the run bit for bit."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import pytorch_lightning as pl
import torch

from harness.seeding import rng_state, set_rng_state
from harness.signals import Interrupted, SignalGate, gate_of

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


class NonFinite(Exception):
    """A NaN or inf reached the loss or a gradient; `where` names the first module or parameter."""

    def __init__(self, step: int, where: str):
        self.step, self.where = step, where
        super().__init__(f"non-finite value at step {step}: {where}")


def first_nonfinite_module(model: torch.nn.Module, input_ids: torch.Tensor) -> str | None:
    """Re-run the forward pass with hooks and name the first module whose output is not finite."""
    found: list[str] = []

    def watch(name):
        def hook(module, inputs, output):
            outputs = output if isinstance(output, tuple) else (output,)
            if not found and any(
                isinstance(o, torch.Tensor) and o.is_floating_point() and not torch.isfinite(o).all()
                for o in outputs
            ):
                found.append(name or type(module).__name__)

        return hook

    handles = [m.register_forward_hook(watch(name)) for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None


class NonFiniteGuard(pl.Callback):
    """Checks the gradients the optimizer is about to apply, in one fused reduction (one host sync a
    step, no anomaly mode). On a NaN or inf it names the first module or parameter at fault, skips
    the update (the weights stay the last good ones) and stops the run by raising NonFinite."""

    def __init__(self):
        self.batch = None
        self.named: list[tuple[str, torch.nn.Parameter]] = []
        # the gradients this step's check read and their norms, until the batch ends: the layer probe
        # (harness.probes.norms), which runs after the guard, logs them instead of taking them again
        self.checked: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])

    def on_train_start(self, trainer, pl_module) -> None:
        self.named = list(pl_module.named_parameters())  # once: walking the module tree each step is not free

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batch = batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.checked = ([], [])

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        params = [(n, p) for n, p in self.named if p.grad is not None]
        if not params:
            return
        grads = [p.grad for _, p in params]
        norms = torch._foreach_norm(grads)
        self.checked = (grads, norms)
        if bool(torch.isfinite(torch.stack(norms)).all()):
            return
        module = first_nonfinite_module(pl_module.model, self.batch["input_ids"])
        grads = [n for (n, _), norm in zip(params, norms, strict=True) if not torch.isfinite(norm)]
        where = (
            f"module {module} outputs a non-finite value" if module else f"non-finite gradient in {grads[0]}"
        )
        optimizer.zero_grad(set_to_none=True)
        raise NonFinite(trainer.global_step, where)


class StopOnSignal(SignalGate, pl.Callback):
    """SIGINT, SIGTERM and SIGUSR2 during a training step finish it, save a checkpoint, then stop the run by
    raising Interrupted; anywhere else in the job (data generation, the preflight, judging, plots) they raise
    Interrupted at once (harness.signals.SignalGate), and so does a second signal during a step. Under DDP the
    ranks decide together, every step."""

    def __init__(self, checkpoint: Path):
        SignalGate.__init__(self)
        self.checkpoint = checkpoint
        #: what the job is doing, for the line that says where a signal stopped it
        self.phase = "start-up"

    def hand_on(self) -> None:
        """Once the run stopped for a signal has saved last.ckpt and its verdict (call after restore()): pass the
        signal on to the handler that was there before ours, if that is a Python function. On a job of the
        submitit launcher (hydra/launcher=slurm or local) it is submitit's, which requeues the job when
        hydra.launcher.max_num_timeout allows and exits; the job starts again in the same run dir and continues
        from that checkpoint (harness.run). Elsewhere (Ctrl-C, a plain kill, harness's own gates of train.py and
        of sweeps, which act on the verdict instead) nothing is called."""
        if self.received is None:
            return
        handler = signal.getsignal(self.received)
        if not callable(handler) or handler is signal.default_int_handler or gate_of(handler) is not None:
            return
        log.info(
            "%s: handed on to %s",
            signal.Signals(self.received).name,
            getattr(handler, "__qualname__", handler),
        )
        try:
            handler(self.received, None)
        except Exception as err:  # submitit's "not requeued" (e.g. timed out too often): the verdict stands
            log.warning("not requeued: %s", err)

    def on_train_start(self, trainer, pl_module) -> None:
        # Lightning put its own SIGTERM handler in front of ours when fit began; a signal landing between our
        # on_train_batch_end and its own check would end the run by SystemExit: exit 0, no checkpoint, no
        # verdict. Ours alone decides (Lightning restores the handlers it found when fit ends).
        self.install()
        self.phase, self.deferring = "training", True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        signum = self.received
        if trainer.world_size > 1:  # every rank stops at the same step, or one waits in an all-reduce forever
            if not trainer.strategy.reduce_boolean_decision(signum is not None, all=False):
                return
            signum = signum or signal.SIGTERM  # a rank the signal did not reach stops as if it had
        elif signum is None:
            return
        self.stop(trainer, signum)

    def on_train_end(self, trainer, pl_module) -> None:
        # past the last step: a signal from now on stops at once, and one that came after the last step's end
        # (during the last validation) stops the run here, its final weights saved as after any step
        self.phase, self.deferring = "the end of training", False
        if self.received is not None:
            self.stop(trainer, self.received)

    def stop(self, trainer, signum: int) -> None:
        # saved where ModelCheckpoint saves, so it resumes exactly like a periodic checkpoint
        trainer.save_checkpoint(self.checkpoint)
        raise Interrupted(signum)


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
