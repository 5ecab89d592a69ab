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
from hydra.types import RunMode
from lightning_fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf

from harness.config import build, validate
from harness.distributed import global_rank, started_by_lightning
from harness.errors import ConfigError
from harness.faults import (
    Interrupted,
    NonFinite,
    NonFiniteGuard,
    ResumeState,
    StopOnSignal,
    check_resume_mode,
    find_checkpoint,
    interrupted_here,
    load_checked,
)
from harness.loggers import build_loggers, finish_loggers
from harness.modes import mode_for
from harness.module import HarnessModule
from harness.seeding import seed_all
from harness.tree import show_config
from harness.verdict import Verdict

log = logging.getLogger(__name__)

#: a verdict's exit code; INTERRUPTED exits 128 + the signal's number
EXIT_CODES = {"PASS": 0, "DONE": 0, "DEBUG": 0, "FAIL": 1, "PREFLIGHT_FAIL": 3, "NONFINITE": 4}


def exit_code(verdict: dict) -> int:
    if verdict["status"] == "INTERRUPTED":
        return 128 + verdict["signal"]
    return EXIT_CODES.get(verdict["status"], 1)


def resume_from(ckpt_path: str | None, run_dir: Path, module: HarnessModule) -> str | None:
    """The checkpoint to resume from, checked against the model: `last` is the newest last.ckpt of an
    earlier run under the same outputs folder. Loaded weights-only: a checkpoint cannot run code."""
    if ckpt_path is None:
        return None
    ckpt_path = find_checkpoint(ckpt_path, run_dir)
    load_checked(ckpt_path, module.state_dict(), "resume with the config it was trained with")
    return ckpt_path


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list, loggers: list) -> pl.Trainer:
    """The Lightning Trainer: what the harness sets from its own keys (harness.config.TRAINER_KEYS refuses them
    under trainer.), then every trainer.NAME as given, a value with a _target_ built (e.g. a profiler)."""
    mode = cfg.mode
    harness_sets = dict(
        max_steps=mode.max_steps,
        max_epochs=-1,
        val_check_interval=mode.val_every,
        check_val_every_n_epoch=None,
        log_every_n_steps=mode.log_every,
        enable_progress_bar=mode.progress_bar,
        enable_checkpointing=mode.name == "full",
        # overfit mode: every DDP rank trains on the same n examples (the run is the one-process run, its
        # gradients all-reduced); full mode: each rank reads its own share of the data
        use_distributed_sampler=mode.name != "overfit",
        default_root_dir=run_dir,
        callbacks=callbacks,
        logger=loggers,
    )
    given = {"num_sanity_val_steps": 0}  # harness's default, which trainer.num_sanity_val_steps may change
    for key, value in cfg.trainer.items():
        if isinstance(value, DictConfig) and "_target_" in value:
            given[key] = build(value, f"trainer.{key}")
        else:
            given[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    # no ModelSummary among the callbacks (callbacks.model_summary=null): none, rather than Lightning's own
    given.setdefault("enable_model_summary", any(isinstance(c, pl.callbacks.ModelSummary) for c in callbacks))
    try:
        return pl.Trainer(**harness_sets, **given)
    except TypeError as err:
        name = re.search(r"'(\w+)'", str(err))
        key = name.group(1) if name else next((k for k in given if f"`{k}`" in str(err)), "?")
        raise ConfigError(f"trainer.{key}", given.get(key, ""), f"Lightning refuses it ({err})") from None
    except MisconfigurationException as err:  # e.g. a ModelCheckpoint in callbacks in overfit mode
        named = [type(c).__name__ for c in callbacks if type(c).__name__ in str(err)]
        key = next((k for k in given if k in str(err)), None)
        if named or not key:
            raise ConfigError("callbacks", ", ".join(named), f"Lightning refuses it: {err}") from None
        raise ConfigError(f"trainer.{key}", given[key], f"Lightning refuses it: {err}") from None


def build_callbacks(cfg: DictConfig) -> list[pl.Callback]:
    """The `callbacks` group's entries (conf/callbacks/), each built from its `_target_`; one that is null or
    `enabled: false` is left out. None where a fork has no callbacks group."""
    made = []
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is None:
            continue
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ConfigError(
                f"callbacks.{name}", node, "give a callback's _target_ (its class) and arguments, or null"
            )
        arguments = OmegaConf.to_container(node, resolve=True)  # `enabled` may point anywhere in the config
        if arguments.pop("enabled", True):
            made.append(build(OmegaConf.create(arguments), f"callbacks.{name}"))
    return made


def build_probes(cfg: DictConfig, run_dir: Path, data, overfit: bool) -> list[pl.Callback]:
    """The callbacks the `probes` config builds (its `_target_`), or none where a fork has no probes."""
    if cfg.get("probes") is None:
        return []
    return build(cfg.probes, "probes", run_dir=run_dir, data=data, overfit=overfit)


def run(cfg: DictConfig) -> dict:
    """Run one job. Returns its verdict (also written to verdict.json in the Hydra output dir)."""
    validate(cfg)  # devices included: here is the machine that runs the job
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if not started_by_lightning():  # before any work: a checkpoint another mode saved
        check_resume_mode(cfg, run_dir)
    if writes():  # rank 0: config_tree.log, and the tree on the console unless in a sweep
        show_config(cfg, run_dir, console=HydraConfig.get().mode != RunMode.MULTIRUN)
    if cfg.mode.name == "eval":  # no training: a checkpoint measured (harness.evaluate)
        from harness.evaluate import evaluate

        verdict = evaluate(cfg, run_dir, write=writes())
        if writes():
            verdict.write(run_dir)
        return verdict.as_dict()
    # from here a signal is recorded and acted on at the next safe point (after the preflight, at the end of
    # a training step), and the handlers stay until the verdict is written
    interrupt = StopOnSignal(run_dir / "checkpoints" / "last.ckpt")
    interrupt.install()
    try:
        verdict = run_job(cfg, run_dir, interrupt)
    finally:
        interrupt.restore()
    if verdict["status"] == "INTERRUPTED":  # a submitit job's own handler requeues it (hydra/launcher=slurm)
        interrupt.hand_on()
    return verdict


def run_job(cfg: DictConfig, run_dir: Path, interrupt: StopOnSignal) -> dict:
    """The stages of one job, in order: build, preflight, fit, judge. Returns the verdict as a dict."""
    started = time.perf_counter()
    mode = mode_for(cfg)
    torch.set_flush_denormal(bool(cfg.flush_denormal))
    seed_all(cfg.seed)  # once: the preflight leaves the generators as it found them
    data, module = build_parts(cfg, mode)
    verdict = start_verdict(cfg, module.model, run_dir, n=getattr(mode, "n", None))
    # before the preflight's work: a bad probe or callback is a config error
    probes = build_probes(cfg, run_dir=run_dir, data=data, overfit=mode.name == "overfit")
    extra = build_callbacks(cfg)

    preflight(cfg, module, data, verdict)
    if interrupt.received is not None:  # while the data was built or the checks ran: stop before training
        verdict.status, verdict.signal = "INTERRUPTED", interrupt.received
        return finish(verdict, started, run_dir, logging.WARNING, "INTERRUPTED before training")
    if cfg.preflight is True and any(c["status"] == "FAIL" for c in verdict.checks):
        verdict.status = "PREFLIGHT_FAIL"
        message = "preflight FAILED: training not started (preflight=warn reports and goes on)"
        return finish(verdict, started, run_dir, logging.ERROR, message)

    checkpoints = run_dir / "checkpoints"
    callbacks = [NonFiniteGuard(), ResumeState(), interrupt, *mode.callbacks(data, verdict, checkpoints)]
    # a job requeued into the dir it was interrupted in continues from its own last.ckpt
    ckpt_path = cfg.ckpt_path or (interrupted_here(run_dir) if mode.name == "full" else None)
    if ckpt_path is not None and cfg.ckpt_path is None:
        log.info("resuming from %s: this run, interrupted in %s", ckpt_path, run_dir)
    # a tracker per logger entry, each given the config and tags; a resumed run appends to metrics.csv
    loggers = build_loggers(cfg, run_dir, resumed=ckpt_path is not None)
    trainer = build_trainer(cfg, run_dir, callbacks + probes + extra, loggers)
    stopped = fit(trainer, module, data, resume_from(ckpt_path, run_dir, module), loggers, interrupt)

    verdict.steps = trainer.global_step
    for probe in probes:  # e.g. dead_params, grad_by_position, inputs_identical
        verdict.items.update(probe.verdict_items() if hasattr(probe, "verdict_items") else {})
    if stopped is not None:
        return finish(
            verdict, started, run_dir, logging.WARNING, stopped_early(verdict, stopped, module, checkpoints)
        )
    if not (cfg.get("debug") or {}).get("judge", True):  # debug=fdr|limit: too short to PASS or FAIL
        verdict.status, verdict.final_loss = "DEBUG", module.final_loss()
        message = f"DEBUG run ({cfg.debug.name}): {verdict.steps} steps, final loss {verdict.final_loss}"
        return finish(verdict, started, run_dir, logging.INFO, message)
    mode.judge(verdict, trainer, module, checkpoints)
    if writes() and verdict.eval_gap:
        log.warning("eval gap: %s", verdict.eval_gap)
    return finish(verdict, started, run_dir, logging.INFO, None, summary=mode.summary)


def build_parts(cfg: DictConfig, mode) -> tuple:
    """The datamodule (set up, as the mode wants it) and the LightningModule around the configured model."""
    data = mode.data(build(cfg.data, "data"))
    data.prepare_data()
    data.setup("fit")
    model = build(cfg.model, "model", vocab_size=data.tokenizer.vocab_size)
    module = HarnessModule(
        model,
        optimizer=build(cfg.optim, "optim"),
        schedule=build(cfg.schedule, "schedule") if cfg.get("schedule") else None,
        total_steps=cfg.mode.max_steps,
        vectorize=cfg.model.get("vectorize", True),
        compile=cfg.compile,
    )
    return data, module


def start_verdict(cfg: DictConfig, model, run_dir: Path, n: int | None) -> Verdict:
    choices = HydraConfig.get().runtime.choices
    debug = {"debug": cfg.debug.name} if cfg.get("debug") else {}  # a debug=... run says which
    return Verdict(
        mode=cfg.mode.name,
        n=n,
        model=getattr(model, "architecture", type(model).__name__),  # the class, e.g. LlamaForCausalLM
        model_group=choices.get("model"),  # the config group's option, e.g. hf
        data=choices.get("data"),
        length=cfg.data.length,
        rule=cfg.data.get("rule"),
        seed=cfg.seed,
        steps=0,
        run_dir=str(run_dir),
        items=debug,
    )


def preflight(cfg: DictConfig, module: HarnessModule, data, verdict: Verdict) -> None:
    """The preflight's rows and seconds into the verdict. A rank Lightning started exists only because rank
    0's preflight passed; ranks SLURM starts together each run it (same seed, same data, same decision), so
    none is left waiting for a rank that stopped."""
    from harness.checks.preflight import run_preflight

    started = time.perf_counter()
    verdict.checks = [] if started_by_lightning() else run_preflight(module, data, cfg)
    verdict.preflight_seconds = round(time.perf_counter() - started, 3)


def fit(trainer: pl.Trainer, module, data, ckpt_path, loggers: list, interrupt: StopOnSignal):
    """Train; the NonFinite or Interrupted that ended it early, or None. The loggers are finished either way."""
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
    return stopped


def stopped_early(verdict: Verdict, stopped: Exception, module: HarnessModule, checkpoints: Path) -> str:
    """Record why training ended before its last step; the console line that says so."""
    verdict.final_loss = module.final_loss()
    if isinstance(stopped, Interrupted):
        verdict.status, verdict.signal = "INTERRUPTED", stopped.signum
        verdict.checkpoint = str(checkpoints / "last.ckpt")
    else:
        log.error("%s: stopped; the weights are those before that step", stopped)
        verdict.status, verdict.nonfinite = "NONFINITE", {"step": stopped.step, "where": stopped.where}
    return f"{verdict.status} after {verdict.steps} steps"


def finish(
    verdict: Verdict, started: float, run_dir: Path, level: int, message: str | None, summary=None
) -> dict:
    """Stamp the time, write verdict.json (rank 0 only: DDP ranks share the run dir), say how the run ended."""
    verdict.seconds = round(time.perf_counter() - started, 3)
    if writes():
        path = verdict.write(run_dir)
        log.log(level, "%s", summary(verdict) if summary else f"{message}: verdict {path}")
        if summary:
            log.info("verdict: %s", path)
    return verdict.as_dict()


def writes() -> bool:
    """Whether this process writes the run's files: rank 0 alone."""
    return global_rank() == 0
