"""The types of the keys harness owns, as dataclasses Hydra composes against (`Train`, a regime per mode, MODES),
put in Hydra's ConfigStore by `register`. A fork's groups (model, data, optim, ...) are `Any`: their classes check
their arguments. A fork's new top-level key goes in `Train` (or is given as `+my_key=1`)."""

# conf/train.yaml lists `train_schema` first in its defaults and each conf/mode/*.yaml its regime's schema, so a
# value of the wrong type is refused by Hydra before anything runs (harness.config.explain words it); ranges and
# rules across keys live in harness.tasks.validate

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class Regime:
    """What every training regime sets: how long, how often."""

    name: str = "overfit"
    max_steps: int = 1000
    val_every: int = 100
    log_every: int = 1
    progress_bar: bool = False


@dataclass
class Overfit(Regime):
    """mode=overfit: memorize n examples, judged PASS or FAIL."""

    name: str = "overfit"
    target_loss: float = 0.02
    reseed: bool = True


@dataclass
class Full(Regime):
    """mode=full: real training, validation and checkpoints, DONE when its steps are."""

    name: str = "full"
    max_steps: int = 2000
    ckpt_every: int = 100


@dataclass
class Eval:
    """mode=eval (or eval.py): a checkpoint measured, no training."""

    name: str = "eval"
    samples: int = 3  # continuations written to eval.json
    new_tokens: int = 32  # tokens each continuation adds
    temperature: float = 0.8  # the sampled continuation's (the other is greedy)


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

    stall_s: float = 300.0  # no rank moved on this long while one waits: the ones behind are named
    silent_s: float = (
        10.0  # a rank whose heartbeat stopped this long is the one stopped (or frozen in C code)
    )
    beat_s: float = 1.0  # each rank's heartbeat, and each look at the others'


@dataclass
class Train:
    """conf/train.yaml's top level."""

    seed: int = 0
    n: int = 2
    preflight: Any = True  # true | false | warn: a union OmegaConf cannot type, checked in validate
    ckpt_path: str | None = None
    compile: Any = False  # true | false | a torch.compile backend name
    flush_denormal: bool = True
    tags: list[str] = field(default_factory=list)  # given to every tracker
    optimized_metric: str | None = None  # what a sweep's job returns (harness.report.optimized_metric)
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
    store = ConfigStore.instance()
    store.store(name="train_schema", node=Train)
    for name, (schema, _) in MODES.items():
        store.store(group="mode", name=f"{name}_schema", node=schema)
