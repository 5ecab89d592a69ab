"""The whole pipeline for one composed config: data -> model -> preflight -> fit -> verdict.json."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from harness.config import validate
from harness.errors import ConfigError
from harness.loggers import build_loggers, finish_loggers
from harness.module import HarnessModule
from harness.probes import build_probes
from harness.overfit import OverfitData, Reseed, StopAtTarget, achievable_floor, evaluate
from harness.seeding import seed_all
from harness.verdict import write_verdict

log = logging.getLogger(__name__)

EXIT_CODES = {"PASS": 0, "DONE": 0, "FAIL": 1, "PREFLIGHT_FAIL": 3}


def build(node: DictConfig, key: str, **kwargs):
    """hydra.utils.instantiate, with a user's mistake turned into a one-line ConfigError."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(cause))
        if isinstance(cause, TypeError) and unexpected:
            name = unexpected.group(1)
            raise ConfigError(f"{key}.{name}", node.get(name), f"{node._target_} takes no argument {name!r}; "
                                                               "check the spelling or remove it") from None
        if isinstance(cause, ValueError):
            raise ConfigError(key, node.get("_target_"), str(cause)) from None
        raise


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list, loggers: list) -> pl.Trainer:
    mode = cfg.mode
    kwargs = dict(
        max_steps=mode.max_steps, max_epochs=-1, val_check_interval=mode.val_every, check_val_every_n_epoch=None,
        log_every_n_steps=mode.log_every, num_sanity_val_steps=0, enable_model_summary=False,
        enable_progress_bar=mode.progress_bar, enable_checkpointing=mode.name == "full",
        default_root_dir=run_dir, callbacks=callbacks, logger=loggers,
        **OmegaConf.to_container(cfg.trainer, resolve=True),
    )
    try:
        return pl.Trainer(**kwargs)
    except TypeError as err:
        name = re.search(r"'(\w+)'", str(err))
        raise ConfigError(f"trainer.{name.group(1) if name else '?'}", "", f"not a Lightning Trainer argument ({err})") from None


def run(cfg: DictConfig) -> dict:
    """Run one job. Returns its verdict (also written to verdict.json in the Hydra output dir)."""
    validate(cfg)
    started = time.perf_counter()
    hydra = HydraConfig.get()
    run_dir = Path(hydra.runtime.output_dir)
    overfit = cfg.mode.name == "overfit"
    torch.set_flush_denormal(bool(cfg.flush_denormal))
    seed_all(cfg.seed)

    data = build(cfg.data, "data")
    if overfit:
        data = OverfitData(data, n=cfg.n, steps=cfg.mode.max_steps)
    data.prepare_data()
    data.setup("fit")
    model = build(cfg.model, "model", vocab_size=data.tokenizer.vocab_size)
    module = HarnessModule(model, **cfg.optim, vectorize=cfg.model.get("vectorize", True))

    verdict = {
        "mode": cfg.mode.name, "n": cfg.n if overfit else None, "model": hydra.runtime.choices.get("model"),
        "data": hydra.runtime.choices.get("data"), "length": cfg.data.length, "rule": cfg.data.get("rule"),
        "seed": cfg.seed, "status": None, "final_loss": None, "floor": None, "steps": 0, "seconds": None,
        "accuracy": None, "p_correct": None, "val_loss": None, "checks": [], "run_dir": str(run_dir),
    }
    from harness.checks.preflight import run_preflight

    verdict["checks"] = run_preflight(module, data, cfg)
    if cfg.preflight is True and any(c["status"] == "FAIL" for c in verdict["checks"]):
        verdict.update(status="PREFLIGHT_FAIL", seconds=round(time.perf_counter() - started, 3))
        write_verdict(run_dir, verdict)
        log.error("preflight FAILED: training not started (preflight=warn reports and goes on)")
        return verdict

    seed_all(cfg.seed)  # the checks drew random numbers: training starts from the same state either way
    callbacks: list[pl.Callback] = []
    if overfit:
        batch = data.batch()
        verdict["floor"] = achievable_floor(batch)
        stop = StopAtTarget(verdict["floor"], cfg.mode.target_loss)
        callbacks += [stop] + ([Reseed(cfg.seed)] if cfg.mode.reseed else [])
    else:
        callbacks.append(pl.callbacks.ModelCheckpoint(
            dirpath=run_dir / "checkpoints", filename="best", monitor="val/loss", mode="min", save_last=True))
    probes = build_probes(cfg.probes, run_dir=run_dir, data=data, overfit=overfit)
    loggers = build_loggers(cfg.logger, run_dir)
    trainer = build_trainer(cfg, run_dir, callbacks + probes, loggers)

    outcome = "failed"
    try:
        trainer.fit(module, datamodule=data, ckpt_path=cfg.ckpt_path)
        outcome = "success"
    finally:
        finish_loggers(loggers, outcome)

    verdict["steps"] = trainer.global_step
    for probe in probes:  # e.g. dead_params, grad_by_position, inputs_identical
        verdict.update(probe.verdict_items() if hasattr(probe, "verdict_items") else {})
    if overfit:
        trainer.save_checkpoint(run_dir / "checkpoints" / "last.ckpt")
        final = evaluate(module, batch)
        verdict.update(status="PASS" if stop.passed else "FAIL", final_loss=stop.last_loss,
                       val_loss=final["loss"], accuracy=final["acc"], p_correct=final["p_correct"])
    else:
        metrics = {k: v.item() for k, v in trainer.callback_metrics.items()}
        verdict.update(status="DONE", final_loss=metrics.get("train/loss"), val_loss=metrics.get("val/loss"),
                       accuracy=metrics.get("val/acc"), p_correct=metrics.get("val/p_correct"))
    verdict["seconds"] = round(time.perf_counter() - started, 3)
    path = write_verdict(run_dir, verdict)
    log.info("%s", summary_line(verdict, cfg))
    log.info("verdict: %s", path)
    return verdict


def summary_line(verdict: dict, cfg: DictConfig) -> str:
    if verdict["mode"] == "full":
        return f"DONE: {verdict['steps']} steps, val loss {verdict['val_loss']}, {verdict['seconds']:.1f} s"
    reached = "reached" if verdict["status"] == "PASS" else "did not reach"
    return (f"{verdict['status']}: {verdict['model']} on n={verdict['n']} {verdict['data']} examples {reached} "
            f"loss {verdict['final_loss']:.4f} (floor {verdict['floor']:.4f} + target {cfg.mode.target_loss}) "
            f"in {verdict['steps']} steps, {verdict['seconds']:.1f} s; accuracy {verdict['accuracy']:.2f}, "
            f"p(correct) {verdict['p_correct']:.3f}")
