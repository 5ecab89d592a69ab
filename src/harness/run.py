"""The whole pipeline for one composed config: data -> model -> preflight -> fit -> verdict.json."""

from __future__ import annotations

import logging
import re
import signal
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from harness.config import build, validate
from harness.distributed import global_rank, started_by_lightning
from harness.errors import ConfigError
from harness.faults import FinalCheckpoint, Interrupted, NonFinite, NonFiniteGuard, ResumeState, StopOnSignal
from harness.loggers import build_loggers, finish_loggers
from harness.module import HarnessModule
from harness.overfit import OverfitData, Reseed, StopAtTarget, achievable_floor, eval_gap, evaluate
from harness.seeding import seed_all
from harness.verdict import write_verdict

log = logging.getLogger(__name__)

#: a verdict's exit code; INTERRUPTED exits 128 + the signal's number
EXIT_CODES = {"PASS": 0, "DONE": 0, "FAIL": 1, "PREFLIGHT_FAIL": 3, "NONFINITE": 4}


def exit_code(verdict: dict) -> int:
    if verdict["status"] == "INTERRUPTED":
        return 128 + verdict["signal"]
    return EXIT_CODES.get(verdict["status"], 1)


def resume_from(ckpt_path: str | None, run_dir: Path, module: HarnessModule) -> str | None:
    """The checkpoint to resume from, checked against the model: `last` is the newest last.ckpt of an
    earlier run under the same outputs folder. Loaded weights-only: a checkpoint cannot run code."""
    if ckpt_path is None:
        return None
    if ckpt_path == "last":
        runs = run_dir.parent.parent  # outputs/runs/<date>/<time> -> outputs/runs
        found = sorted(runs.glob("*/*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
        found = [p for p in found if run_dir not in p.parents]
        if not found:
            raise ConfigError(
                "ckpt_path",
                "last",
                f"no earlier run under {runs} has checkpoints/last.ckpt; give a checkpoint's path",
            )
        ckpt_path = str(found[-1])
        log.info("resuming from %s", ckpt_path)
    try:
        state = torch.load(ckpt_path, map_location="cpu", weights_only=True)["state_dict"]
    except Exception as err:
        raise ConfigError(
            "ckpt_path", ckpt_path, f"not a readable Lightning checkpoint ({type(err).__name__})"
        ) from None
    ours = module.state_dict()
    for key in sorted(set(ours) | set(state)):
        if key not in ours or key not in state or ours[key].shape != state[key].shape:
            theirs = tuple(state[key].shape) if key in state else "missing"
            mine = tuple(ours[key].shape) if key in ours else "missing"
            raise ConfigError(
                "ckpt_path",
                ckpt_path,
                f"belongs to another model shape: {key} is {theirs} there, "
                f"{mine} here; resume with the config it was trained with",
            )
    return ckpt_path


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list, loggers: list) -> pl.Trainer:
    mode = cfg.mode
    kwargs = dict(
        max_steps=mode.max_steps,
        max_epochs=-1,
        val_check_interval=mode.val_every,
        check_val_every_n_epoch=None,
        log_every_n_steps=mode.log_every,
        num_sanity_val_steps=0,
        enable_model_summary=False,
        enable_progress_bar=mode.progress_bar,
        enable_checkpointing=mode.name == "full",
        # overfit mode: every DDP rank trains on the same n examples (the run is the one-process run, its
        # gradients all-reduced); full mode: each rank reads its own share of the data
        use_distributed_sampler=mode.name != "overfit",
        default_root_dir=run_dir,
        callbacks=callbacks,
        logger=loggers,
        **OmegaConf.to_container(cfg.trainer, resolve=True),
    )
    try:
        return pl.Trainer(**kwargs)
    except TypeError as err:
        name = re.search(r"'(\w+)'", str(err))
        raise ConfigError(
            f"trainer.{name.group(1) if name else '?'}", "", f"not a Lightning Trainer argument ({err})"
        ) from None


def build_probes(cfg: DictConfig, run_dir: Path, data, overfit: bool) -> list[pl.Callback]:
    """The callbacks the `probes` config builds (its `_target_`), or none where a fork has no probes."""
    if cfg.get("probes") is None:
        return []
    return build(cfg.probes, "probes", run_dir=run_dir, data=data, overfit=overfit)


def run(cfg: DictConfig) -> dict:
    """Run one job. Returns its verdict (also written to verdict.json in the Hydra output dir)."""
    validate(cfg)  # devices included: here is the machine that runs the job
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # from here a signal is recorded and acted on at the next safe point (after the preflight, at the end of
    # a training step), and the handlers stay until the verdict is written
    interrupt = StopOnSignal(run_dir / "checkpoints" / "last.ckpt")
    interrupt.install()
    try:
        return run_job(cfg, run_dir, interrupt)
    finally:
        interrupt.restore()


def run_job(cfg: DictConfig, run_dir: Path, interrupt: StopOnSignal) -> dict:
    started = time.perf_counter()
    hydra = HydraConfig.get()
    overfit = cfg.mode.name == "overfit"
    torch.set_flush_denormal(bool(cfg.flush_denormal))
    seed_all(cfg.seed)

    data = build(cfg.data, "data")
    if overfit:
        data = OverfitData(data, n=cfg.n, steps=cfg.mode.max_steps)
    data.prepare_data()
    data.setup("fit")
    model = build(cfg.model, "model", vocab_size=data.tokenizer.vocab_size)
    module = HarnessModule(
        model, **cfg.optim, vectorize=cfg.model.get("vectorize", True), compile=cfg.compile
    )
    # only rank 0 writes: verdict, metrics, probe outputs (DDP ranks share the run dir)
    first = global_rank() == 0

    verdict = {
        "mode": cfg.mode.name,
        "n": cfg.n if overfit else None,
        "model": getattr(model, "architecture", type(model).__name__),  # the class, e.g. LlamaForCausalLM
        "model_group": hydra.runtime.choices.get("model"),  # the config group's option, e.g. hf
        "data": hydra.runtime.choices.get("data"),
        "length": cfg.data.length,
        "rule": cfg.data.get("rule"),
        "seed": cfg.seed,
        "status": None,
        "final_loss": None,
        "floor": None,
        "steps": 0,
        "seconds": None,
        "accuracy": None,
        "p_correct": None,
        "val_loss": None,
        "checks": [],
        "run_dir": str(run_dir),
    }
    # before any work: a bad probe is a config error
    probes = build_probes(cfg, run_dir=run_dir, data=data, overfit=overfit)
    from harness.checks.preflight import run_preflight

    preflight_started = time.perf_counter()
    # a rank Lightning started exists only because rank 0's preflight passed; ranks SLURM starts together each
    # run it (same seed, same data, same decision), so none is left waiting for a rank that stopped
    verdict["checks"] = [] if started_by_lightning() else run_preflight(module, data, cfg)
    verdict["preflight_seconds"] = round(time.perf_counter() - preflight_started, 3)

    def stop(level: int, message: str, **items) -> dict:
        """End the run before its verdict's usual end: record `items` and the time, write it, say why."""
        verdict.update(items, seconds=round(time.perf_counter() - started, 3))
        if first:
            write_verdict(run_dir, verdict)
        log.log(level, "%s: verdict %s", message, run_dir / "verdict.json")
        return verdict

    if interrupt.received is not None:  # while the data was built or the checks ran: stop before training
        return stop(
            logging.WARNING, "INTERRUPTED before training", status="INTERRUPTED", signal=interrupt.received
        )
    if cfg.preflight is True and any(c["status"] == "FAIL" for c in verdict["checks"]):
        return stop(
            logging.ERROR,
            "preflight FAILED: training not started (preflight=warn reports and goes on)",
            status="PREFLIGHT_FAIL",
        )

    seed_all(cfg.seed)  # the checks drew random numbers: training starts from the same state either way
    checkpoints = run_dir / "checkpoints"
    callbacks: list[pl.Callback] = [NonFiniteGuard(), ResumeState(), interrupt]
    if overfit:
        batch = data.batch()
        verdict["floor"] = achievable_floor(batch)
        target = StopAtTarget(verdict["floor"], cfg.mode.target_loss)
        callbacks += [target] + ([Reseed(cfg.seed)] if cfg.mode.reseed else [])
    else:
        callbacks += [  # best by validation loss, and last every mode.ckpt_every steps (a hard kill loses less)
            pl.callbacks.ModelCheckpoint(
                dirpath=checkpoints, filename="best", monitor="val/loss", mode="min"
            ),
            pl.callbacks.ModelCheckpoint(
                dirpath=checkpoints,
                filename="last",
                every_n_train_steps=cfg.mode.ckpt_every,
                enable_version_counter=False,
            ),
            FinalCheckpoint(checkpoints / "last.ckpt", cfg.mode.ckpt_every),
        ]
    loggers = build_loggers(cfg.logger, run_dir)
    trainer = build_trainer(cfg, run_dir, callbacks + probes, loggers)

    ckpt_path = resume_from(cfg.ckpt_path, run_dir, module)
    outcome, stopped = "failed", None
    try:
        trainer.fit(module, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
        outcome = "success"
    except (NonFinite, Interrupted) as err:
        stopped = err
    finally:
        finish_loggers(loggers, outcome)
    if stopped is None and interrupt.received is not None:
        log.warning(
            "%s received after the last step: the run is complete, its verdict follows",
            signal.Signals(interrupt.received).name,
        )

    verdict["steps"] = trainer.global_step
    for probe in probes:  # e.g. dead_params, grad_by_position, inputs_identical
        verdict.update(probe.verdict_items() if hasattr(probe, "verdict_items") else {})
    if isinstance(stopped, Interrupted):
        verdict.update(status="INTERRUPTED", signal=stopped.signum, checkpoint=str(checkpoints / "last.ckpt"))
    elif isinstance(stopped, NonFinite):
        log.error("%s: stopped; the weights are those before that step", stopped)
        verdict.update(status="NONFINITE", nonfinite={"step": stopped.step, "where": stopped.where})
    if stopped is not None:
        return stop(
            logging.WARNING,
            f"{verdict['status']} after {verdict['steps']} steps",
            final_loss=last_loss(module),
        )
    if overfit:
        trainer.save_checkpoint(checkpoints / "last.ckpt")
        final = evaluate(module, batch)
        trained = evaluate(module, batch, training=True, seed=cfg.seed)
        verdict.update(
            status="PASS" if target.passed else "FAIL",
            final_loss=target.last_loss,
            val_loss=final["loss"],
            accuracy=final["acc"],
            p_correct=final["p_correct"],
            eval_loss=final["loss"],  # eval mode, on the same n examples (the same as val_loss here)
            eval_accuracy=final["acc"],
            train_accuracy=trained["acc"],  # train mode, re-seeded as a step: the final weights
            eval_gap=eval_gap(trained, final),
        )
        if first and verdict["eval_gap"]:
            log.warning("eval gap: %s", verdict["eval_gap"])
    else:
        metrics = {k: v.item() for k, v in trainer.callback_metrics.items()}
        verdict.update(
            status="DONE",
            final_loss=last_loss(module),
            val_loss=metrics.get("val/loss"),
            accuracy=metrics.get("val/acc"),
            p_correct=metrics.get("val/p_correct"),
        )
    verdict["seconds"] = round(time.perf_counter() - started, 3)
    if first:
        log.info("%s", summary_line(verdict, cfg))
        log.info("verdict: %s", write_verdict(run_dir, verdict))
    return verdict


def last_loss(module: HarnessModule) -> float | None:
    return None if module.last_loss is None else module.last_loss.item()


def summary_line(verdict: dict, cfg: DictConfig) -> str:
    if verdict["mode"] == "full":
        return f"DONE: {verdict['steps']} steps, val loss {verdict['val_loss']}, {verdict['seconds']:.1f} s"
    goal = verdict["floor"] + cfg.mode.target_loss
    reached = "reached" if verdict["status"] == "PASS" else "did not reach"
    return (
        f"{verdict['status']}: {verdict['model']} ({verdict['model_group']}) on n={verdict['n']} "
        f"{verdict['data']} examples {reached} the goal in {verdict['steps']} steps, {verdict['seconds']:.1f} s: "
        f"final loss {verdict['final_loss']:.4f}, goal {goal:.4f} (floor {verdict['floor']:.4f} + target "
        f"{cfg.mode.target_loss}); eval mode: accuracy {verdict['accuracy']:.2f}, "
        f"p(correct) {verdict['p_correct']:.3f}"
    )
