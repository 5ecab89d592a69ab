"""The training task, `train(cfg, run_dir)`: build -> preflight -> `fit` (Trainer.fit) -> verdict.json. `run(cfg)`
trains a composed config from code; `open_job` is what every task does first. The path: cli.main -> tasks.job.job
-> train -> fit."""

from __future__ import annotations

import contextlib
import logging
import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from harness.config import build
from harness.config.schema import MODES
from harness.config.show import show_config
from harness.errors import ConfigError, PreflightFailed
from harness.ops.loss import loss_of
from harness.ranks import global_rank, restarted, started_by_lightning
from harness.report.symptoms import judge as judge_symptoms
from harness.report.symptoms import nonfinite
from harness.report.verdict import Verdict
from harness.seeding import seed_all
from harness.signals import Interrupted
from harness.tasks.rank_lost import lost_verdict, watch_of
from harness.tasks.validate import validate
from harness.train.checkpoints import ResumeState, check_resume_mode, interrupted_here, resumption
from harness.train.distributed.devices import SHARDED, check_devices, strategy_name
from harness.train.distributed.heartbeat import ENDED, RAISED
from harness.train.distributed.sharding import check_init_weights, on_meta
from harness.train.distributed.watchdog import RankLost, RankWatch, log_to_file_only
from harness.train.interrupt import StopOnSignal
from harness.train.loggers import build_loggers, finish_loggers
from harness.train.module import HarnessModule
from harness.train.nonfinite import NonFinite, NonFiniteGuard
from harness.train.perf.watches import Readout, RunClock, perf_callbacks, readout_of, speed_of
from harness.train.trainer import build_callbacks, build_trainer

log = logging.getLogger(__name__)


def open_job(cfg: DictConfig, checked: bool = False) -> Path:
    """What every task does first: validate the config (only its devices when `checked`), refuse a checkpoint of
    another mode, write the config tree (rank 0). Returns the run dir."""
    if checked:
        check_devices(cfg.trainer)  # this machine's: the door may have checked the config on another
    else:
        validate(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if not started_by_lightning():  # before any work
        check_resume_mode(cfg, run_dir)
    if writes():
        show_config(cfg, run_dir, console=HydraConfig.get().mode != RunMode.MULTIRUN)
    return run_dir


def run(cfg: DictConfig, checked: bool = False) -> dict:
    """Train a composed config in this process, as train.py does; returns the verdict (also in verdict.json).
    `checked`: the config is validated already."""
    return train(cfg, open_job(cfg, checked))


@dataclass
class Training:
    """What the training task's stages share: config, run dir, regime, the verdict as it fills, the signal
    handler, the start time, (several processes) the watchdog and the run's wall clock."""

    cfg: DictConfig
    run_dir: Path
    mode: object
    verdict: Verdict
    interrupt: StopOnSignal
    started: float
    watch: RankWatch | None = None
    wall: RunClock = field(default_factory=RunClock)


def train(cfg: DictConfig, run_dir: Path) -> dict:
    """The training task: build, preflight, fit, verdict; returns the verdict as a dict. A signal ends it with an
    INTERRUPTED verdict (during a step, at the step's end: StopOnSignal)."""
    started, mode = time.perf_counter(), _mode_for(cfg)
    verdict = _start_verdict(cfg, run_dir, n=getattr(mode, "n", None))
    training = Training(
        cfg, run_dir, mode, verdict, StopOnSignal(run_dir / "checkpoints" / "last.ckpt"), started
    )
    training.interrupt.install()
    try:
        data, module, callbacks = _build_stage(training)
        training.interrupt.phase = "the preflight"
        training.wall.enter("preflight")
        preflight(cfg, module, data, verdict)
        if cfg.preflight is True and any(c["status"] == "FAIL" for c in verdict.checks):
            verdict.status = "PREFLIGHT_FAIL"
            message = "preflight FAILED: training not started (preflight=warn reports and goes on)"
            result = finish(training, logging.ERROR, message)
        else:
            trainer, ckpt_path, loggers = trainer_for(training, data, module, callbacks)
            training.interrupt.phase = "the start of training"
            stopped = fit(trainer, module, data, ckpt_path, loggers, training.watch)
            result = trained_verdict(training, trainer, module, callbacks[0], stopped)
    except Interrupted as stop:
        training.interrupt.holding = True  # another signal while the verdict is written is only noted
        verdict.status, verdict.signal = "INTERRUPTED", stop.signum
        message = f"INTERRUPTED by {signal.Signals(stop.signum).name} during {training.interrupt.phase}"
        result = finish(training, logging.WARNING, message)
    finally:
        training.interrupt.restore()
    if result["status"] == "INTERRUPTED":  # a submitit job's own handler requeues it (hydra/launcher=slurm)
        training.interrupt.hand_on()
    return result


def _mode_for(cfg: DictConfig):
    """The training regime of `cfg.mode.name` (its class named in harness.config.schema.MODES)."""
    regime = MODES[cfg.mode.name][1]
    if regime is None:  # mode=eval: a task of its own
        raise ConfigError(
            "mode",
            cfg.mode.name,
            "run() trains; evaluate with eval.py (harness.tasks.job.named_task names each task)",
        )
    return get_class(regime)(cfg)


def _build_stage(training: Training) -> tuple:
    """The datamodule, the LightningModule, and (the probes, the config's callbacks) to add to the harness's own."""
    # the callbacks are built before the preflight: a bad one is a config error, not a failed preflight
    cfg = training.cfg
    torch.set_flush_denormal(bool(cfg.flush_denormal))
    seed_all(cfg.seed)  # once: the preflight leaves the generators as it found them
    training.interrupt.phase = "data generation and the model's construction"
    data, module = build_parts(cfg, training.mode, training.wall)
    # the class, e.g. LlamaForCausalLM, or the name the model gives itself
    training.verdict.model = getattr(module.model, "architecture", type(module.model).__name__)
    overfit = training.mode.name == "overfit"
    probes = (
        build(cfg.probes, "probes", run_dir=training.run_dir, data=data, overfit=overfit, loss=module.loss)
        if cfg.get("probes") is not None
        else []
    )
    return data, module, (probes, build_callbacks(cfg))


def trainer_for(training: Training, data, module, added: tuple) -> tuple:
    """(the Trainer with every callback and logger, the checkpoint it resumes from, the loggers); `added`: the
    probes and the config's callbacks."""
    cfg, run_dir, mode = training.cfg, training.run_dir, training.mode
    probes, extra = added
    training.watch = watch_of(training, module)
    callbacks = perf_callbacks(cfg, run_dir) + [  # the speed's first: its marks open each round of hooks
        *start_checks(cfg, data, training.verdict, mode),
        NonFiniteGuard(),
        ResumeState(),
        training.interrupt,
    ]
    callbacks += [training.watch, *mode.callbacks(data, training.verdict, run_dir / "checkpoints")]
    # a job started again in the dir it stopped in (requeued, restarted by torchrun) continues from its own
    # last.ckpt, newer than any ckpt_path the command gave (which says where its first attempt began)
    own = interrupted_here(run_dir) if mode.name == "full" else None
    own = own if cfg.ckpt_path is None or restarted() else None  # else the command's own choice stands
    ckpt_path = own or cfg.ckpt_path
    if own is not None:
        began = f" (ckpt_path={cfg.ckpt_path} is where its first attempt began)" if cfg.ckpt_path else ""
        log.info("resuming from %s: this run, stopped in %s%s", own, run_dir, began)
    resumed = resumption(ckpt_path, run_dir, module, cfg.paths.log_dir)
    # a tracker per logger entry, each given the config and tags; a resumed run appends to metrics.csv
    loggers = build_loggers(cfg, run_dir, resumed=resumed)
    # the readout last: what every callback queued of a step is read in its one copy to the host
    trainer = build_trainer(cfg, run_dir, callbacks + probes + extra + [Readout()], loggers)
    return trainer, resumed and resumed.path, loggers


def trained_verdict(training: Training, trainer: pl.Trainer, module, probes: list, stopped) -> dict:
    """Finish the verdict of a run that trained: `stopped` early, a debug run, or the mode's judgement. Returns it
    as a dict."""
    cfg, verdict, interrupt = training.cfg, training.verdict, training.interrupt
    verdict.steps = trainer.global_step
    for probe in [*probes, *speed_of(trainer)]:  # e.g. dead_params, grad_by_position, inputs_identical, perf
        verdict.items.update(probe.verdict_items() if hasattr(probe, "verdict_items") else {})
    readout = readout_of(trainer)  # the symptoms the probes and the speed's checks reported, in order
    found = readout.verdict_items()["symptoms"] if readout is not None else []
    verdict.items["symptoms"] = [*verdict.items.get("symptoms", []), *found]
    if isinstance(stopped, RankLost):
        interrupt.holding = True
        lost_verdict(training, trainer, module, stopped.fault)
        return finish(
            training, logging.ERROR, stopped.fault.line(), writer=training.watch.writes(stopped.fault)
        )
    if stopped is not None:
        interrupt.holding = isinstance(stopped, Interrupted)  # stopping: another signal is only noted
        message = _stopped_early(verdict, stopped, module, training.run_dir / "checkpoints", interrupt.phase)
        return finish(training, logging.WARNING, message)
    interrupt.phase = "judging and plotting"
    if not (cfg.get("debug") or {}).get("judge", True):  # debug=fdr|limit: too short to PASS or FAIL
        verdict.status, verdict.final_loss = "DEBUG", module.final_loss()
        message = f"DEBUG run ({cfg.debug.name}): {verdict.steps} steps, final loss {verdict.final_loss}"
        return finish(training, logging.INFO, message, fail_on=_symptoms_fail(cfg))
    training.mode.judge(verdict, trainer, module, training.run_dir / "checkpoints")
    if writes() and verdict.eval_gap:
        log.warning("eval gap: %s", verdict.eval_gap)
    return finish(training, logging.INFO, None, summary=training.mode.summary, fail_on=_symptoms_fail(cfg))


def _symptoms_fail(cfg: DictConfig) -> bool:
    """probes.symptoms.fail: whether a symptom turns a PASS or DONE into SYMPTOM (exit 5)."""
    return bool(OmegaConf.select(cfg, "probes.symptoms.fail", default=False))


def build_parts(cfg: DictConfig, mode, clock: RunClock | None = None) -> tuple:
    """(the datamodule, set up as the mode wants it; the LightningModule around the configured model); `clock`
    is told when the model's construction begins."""
    data = mode.data(build(cfg.data, "data"))
    data.prepare_data()
    data.setup("fit")
    check_splits(data, cfg.data.get("_target_"))
    if clock is not None:
        clock.enter("model")
    with torch.device("meta") if on_meta(cfg) else contextlib.nullcontext():  # too large for one rank
        model = build(cfg.model, "model", vocab_size=data.tokenizer.vocab_size)
    if on_meta(cfg):
        check_init_weights(model)
    module = HarnessModule(
        model,
        loss=loss_of(cfg),
        optimizer=build(cfg.optim, "optim"),
        schedule=build(cfg.schedule, "schedule") if cfg.get("schedule") else None,
        total_steps=cfg.mode.max_steps,
        compile=cfg.compile,
    )
    return data, module


def check_splits(data, target) -> None:
    """Raise ConfigError (exit 2) where the source's training or validation split holds no example."""
    source = getattr(data, "base", data)
    for split, name in (("train", "training"), ("val", "validation")):
        try:
            empty = len(getattr(source, f"{split}_dataset")) == 0
        except (AttributeError, TypeError):  # no such split, or a stream of no known length
            continue
        if empty:
            raise ConfigError(
                "data", target, f"the {name} split holds no examples; give the source at least one"
            )


def _start_verdict(cfg: DictConfig, run_dir: Path, n: int | None) -> Verdict:
    """The verdict as it starts, before anything is built."""
    choices = HydraConfig.get().runtime.choices
    debug = {"debug": cfg.debug.name} if cfg.get("debug") else {}  # a debug=... run says which
    return Verdict(
        mode=cfg.mode.name,
        n=n,
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
    """Run the preflight (not on a rank Lightning started) and put its rows and seconds into the verdict."""
    # ranks SLURM or torchrun start together each run it, with one seed and one decision: none waits for another
    from harness.checks.preflight import run_preflight

    started = time.perf_counter()
    verdict.checks = [] if started_by_lightning() else run_preflight(module, data, cfg)
    verdict.preflight_seconds = round(time.perf_counter() - started, 3)
    if verdict.checks and on_meta(cfg):
        log.info(
            "preflight: the model is on the meta device (trainer.strategy.meta_init): the data checks ran, the "
            "model checks that need the whole model on one rank are SKIP, init_loss runs once it is sharded"
        )
    elif verdict.checks and strategy_name(cfg.trainer) in SHARDED:
        log.info(
            "preflight: run on rank 0 with the whole model, before sharding: %s shards it when training starts",
            strategy_name(cfg.trainer),
        )


def start_checks(cfg: DictConfig, data, verdict: Verdict, mode) -> list:
    """The callback running the preflight rows read as training starts (harness.checks.at_start), or [] when the
    preflight is off."""
    if cfg.preflight is False:
        return []
    from harness.checks.at_start.start_checks import StartChecks

    # overfit mode: every rank reads the same n examples by design
    return [StartChecks(data, cfg, verdict.checks, shared_data=mode.name == "overfit")]


def fit(trainer: pl.Trainer, module, data, ckpt_path, loggers: list, watch: RankWatch | None = None):
    """Trainer.fit; returns what stopped it early (NonFinite, Interrupted, PreflightFailed, RankLost) or None. The
    loggers are finished either way."""
    outcome, stopped = "failed", None
    try:
        trainer.fit(module, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
        if any(getattr(c, "validate_after_fit", False) for c in trainer.callbacks):
            _end_as_it_would_have(trainer, module, data)  # resumed at the last step, before its validation
        outcome = "success"
    except (NonFinite, Interrupted, PreflightFailed) as err:
        stopped = err
    except Exception as err:
        fault = watch.explain(err) if watch is not None else None  # a collective lost its peer: a rank lost
        if fault is None:
            if watch is not None and watch.world > 1:  # the others: this rank's own error, not a rank lost
                log_to_file_only(
                    logging.ERROR, f"this rank's own error ends the run:\n{traceback.format_exc()}"
                )
                watch.close(f"{RAISED} {err!r:.300}")
            raise
        log_to_file_only(logging.INFO, f"the error a rank's loss caused here: {err!r}")
        stopped = RankLost(fault)
    finally:
        if watch is not None:
            watch.close(ENDED)
        finish_loggers(loggers, outcome)
    return stopped


def _end_as_it_would_have(trainer: pl.Trainer, module, data) -> None:
    """For a run resumed from its last step's checkpoint (Lightning runs nothing more): the validation, then the
    non-Lightning callbacks' on_train_start and on_train_end, as the run it resumes would have."""
    trainer.validate(module, datamodule=data, verbose=False)
    own = [
        c for c in trainer.callbacks if not type(c).__module__.startswith(("pytorch_lightning", "lightning"))
    ]
    for hook in ("on_train_start", "on_train_end"):
        for callback in own:
            getattr(callback, hook)(trainer, module)


def _stopped_early(verdict: Verdict, stopped: BaseException, module, checkpoints: Path, phase: str) -> str:
    """Record in `verdict` why training ended before its last step; returns the console line."""
    verdict.final_loss = module.final_loss()
    if isinstance(stopped, Interrupted):
        verdict.status, verdict.signal = "INTERRUPTED", stopped.signum
        # a second signal stops at once, maybe before the step's checkpoint: then the last periodic one, if any
        last = checkpoints / "last.ckpt"
        verdict.checkpoint = str(last) if last.is_file() else None
        return (
            f"INTERRUPTED by {signal.Signals(stopped.signum).name} during {phase} after {verdict.steps} steps"
        )
    if isinstance(stopped, PreflightFailed):
        verdict.status = "PREFLIGHT_FAIL"
        return (
            f"preflight FAILED as training started ({stopped.check}, its row above says why): no step taken"
        )
    log.error("%s: stopped; the weights are those before that step", stopped)
    verdict.status, verdict.nonfinite = "NONFINITE", {"step": stopped.step, "where": stopped.where}
    symptoms = verdict.items.setdefault("symptoms", [])
    # the probes' sink reports it itself, when there are probes
    if not any(s["name"] == "nonfinite" for s in symptoms):
        found = nonfinite(stopped)
        log.warning("%s", found.line())
        symptoms.append(found.as_dict())
    return f"{verdict.status} after {verdict.steps} steps"


def finish(
    training: Training,
    level: int,
    message: str | None,
    summary=None,
    fail_on: bool = False,
    writer: bool | None = None,
) -> dict:
    """Stamp the time, judge the symptoms (`fail_on`), write verdict.json (rank 0, or `writer`), log the ending.
    Returns the verdict as a dict."""
    verdict = training.verdict
    verdict.seconds = round(time.perf_counter() - training.started, 3)
    training.wall.stamp(verdict, training.run_dir)  # perf.wall: the run's whole time so far, by phase
    line = summary(verdict) if summary else message  # the run's own ending, before the symptoms judge it
    judge_symptoms(verdict, fail_on)
    if writes() if writer is None else writer:
        path = verdict.write(training.run_dir)
        log.log(level, "%s", line if summary else f"{line}: verdict {path}")
        if verdict.status == "SYMPTOM":
            names = sorted({s["name"] for s in verdict.items["symptoms"]})
            log.error("SYMPTOM: %s (probes.symptoms.fail=true turns them into exit 5)", ", ".join(names))
        if summary:
            log.info("verdict: %s", path)
    return verdict.as_dict()


def writes() -> bool:
    """Whether this process writes the run's files (rank 0)."""
    return global_rank() == 0
