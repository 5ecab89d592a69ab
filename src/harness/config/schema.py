"""harness's own keys declared once, as dataclasses Hydra composes against (`Train`, a regime per mode, MODES), put
in Hydra's ConfigStore by `register` with every group's options (harness.config.groups). A fork's new top-level key
goes in `Train` (or is given as `+my_key=1`)."""

# conf/train.yaml lists `train_schema` first in its defaults and each conf/mode/*.yaml its regime's schema, so a
# value of the wrong type is refused by Hydra before anything runs (harness.config.explain words it); the ranges
# and rules across keys are read from the same fields by harness.config.declare.check_declared

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from harness.config.declare import key
from harness.errors import ConfigError


@dataclass
class Regime:
    """What every training regime sets: how long, how often."""

    name: str = key("overfit", "the mode this regime is (mode=overfit)")
    max_steps: int = key(1000, "the step budget", low=1, whole=True)
    val_every: int = key(100, "steps between validations", low=1, whole=True)
    log_every: int = key(1, "steps between logged rows", low=1, whole=True)
    progress_bar: bool = key(False, "Lightning's progress bar (callbacks=rich for Rich's)")


@dataclass
class Overfit(Regime):
    """mode=overfit: memorize n examples, judged PASS or FAIL."""

    name: str = key("overfit", "the mode this regime is")
    target_loss: float = key(0.02, "the loss above the floor that counts as memorized", low=0.0)
    reseed: bool = key(True, "re-seed every training and validation step with `seed` (practice P3)")


@dataclass
class Full(Regime):
    """mode=full: real training, validation and checkpoints, DONE when its steps are."""

    name: str = key("full", "the mode this regime is")
    max_steps: int = key(2000, "optimizer steps", low=1, whole=True)
    val_every: int = key(
        200, "steps between validations (fewer max_steps never validate: the door warns)", low=1, whole=True
    )
    ckpt_every: int = key(
        100,
        "steps between saves of checkpoints/last.ckpt (a hard kill loses at most these)",
        low=1,
        whole=True,
    )
    log_every: int = key(10, "steps between logged rows", low=1, whole=True)
    progress_bar: bool = key(True, "Lightning's progress bar")


@dataclass
class Eval:
    """mode=eval (or eval.py): a checkpoint measured, no training."""

    name: str = key("eval", "the mode: a checkpoint measured")
    samples: int = key(
        3, "validation examples continued in eval.json: the first half is the prompt", low=0, whole=True
    )
    new_tokens: int = key(32, "tokens each continuation adds", low=1, whole=True)
    temperature: float = key(0.8, "the sampled continuation's temperature (the other is greedy)", low=0.0)


#: every mode: its typed config, and the class that runs it (a training regime; eval is a task of its own,
#: harness.tasks.evaluate). The one table of mode names: the schema, the door and the run all read it.
MODES = {
    "overfit": (Overfit, "harness.train.overfit.Overfit"),
    "full": (Full, "harness.train.full_run.Full"),
    "eval": (Eval, None),
}


@dataclass
class Watchdog:
    """When a run on several processes names a rank that died or stopped (harness.train.distributed.watchdog)."""

    stall_s: float = key(
        300.0, "seconds of no step on any rank that make a stall; the ones behind are named", low=0.1
    )
    silent_s: float = key(
        10.0, "seconds of no heartbeat that name a rank stopped (or frozen in C code)", low=0.1
    )
    beat_s: float = key(1.0, "seconds between a rank's heartbeats, and each look at the others'", low=0.05)

    @staticmethod
    def rules(node, cfg) -> None:
        """A rank is silent only after three missed beats, and a stall lasts at least that long."""
        if node.silent_s < 3 * node.beat_s:
            raise ConfigError(
                "watchdog.silent_s",
                node.silent_s,
                f"must be at least 3 beats (watchdog.beat_s={node.beat_s}): a rank is silent once it missed three",
            )
        if node.stall_s < node.silent_s:
            raise ConfigError(
                "watchdog.stall_s",
                node.stall_s,
                f"must be at least watchdog.silent_s={node.silent_s}: a stalled rank is named after both",
            )


@dataclass
class Train:
    """conf/train.yaml's top level."""

    seed: int = key(
        0, "seeds python, numpy and torch; overfit mode re-seeds every step with it", low=0, whole=True
    )
    n: int = key(
        2,
        "examples to overfit (mode=overfit): the first n of the training split, one batch",
        low=1,
        whole=True,
    )
    # true | false | warn: a union OmegaConf cannot type, held to its choices
    preflight: Any = key(
        True,
        "true: stop on any FAIL (exit 3) | warn: report and go on | false: skip",
        choices=(True, False, "warn"),
    )
    ckpt_path: str | None = key(
        None, "mode=full: a checkpoint to resume from (last: the run dir's last.ckpt)"
    )
    compile: Any = key(False, "true: torch.compile the training step | false | a torch.compile backend name")
    flush_denormal: bool = key(
        True, "CPU: treat subnormal floats as 0 (they can slow a small model's step 50x)"
    )
    tags: list[str] = key([], "labels for this run, given to every tracker: tags=[baseline,lr-sweep]")
    optimized_metric: str | None = key(
        None, "what a hyperparameter search optimizes (harness.report.optimized_metric)"
    )
    loss: Any = None  # conf/loss/: the training objective (harness.ops.loss)
    optim: Any = None
    schedule: Any = None
    mode: Any = None  # typed by its regime's schema (MODES), through conf/mode/*.yaml's defaults
    model: Any = None
    data: Any = None
    tokenizer: Any = None
    trainer: Any = None
    logger: Any = None
    probes: Any = None
    perf: Any = None  # conf/perf/: the speed figures and the time split (harness.train.perf)
    callbacks: Any = None  # conf/callbacks/: Lightning callbacks, each a _target_ node
    debug: Any = None  # conf/debug/ (optional): fdr | limit | profiler | anomaly
    paths: Any = None  # conf/paths/: data_dir, log_dir, output_dir
    watchdog: Watchdog = field(default_factory=Watchdog)
    doctor: Any = None  # experiment=doctor: {ladder, substitute, timeout} (harness.tasks.doctor)


def register() -> None:
    """Store `train_schema` and a `mode/<mode>_schema` per mode in Hydra's ConfigStore. Idempotent; called as Hydra
    starts (hydra_plugins.harness_schema)."""
    from harness.config.groups import register as register_groups

    store = ConfigStore.instance()
    store.store(name="train_schema", node=Train)
    register_groups(store)
    for name, (schema, _) in MODES.items():
        store.store(group="mode", name=f"{name}_schema", node=schema)
