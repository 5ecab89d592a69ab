"""The types of the keys harness itself owns, as dataclasses Hydra holds the config to while composing.

conf/train.yaml lists `train_schema` first in its defaults, so `n=abc` or `mode.max_steps=1.5` is refused
by Hydra before anything runs, with the key named (harness.cli turns that into one line). Ranges and rules
across keys, which a type cannot say, live in harness.config.validate. The groups a fork makes its own
(model, data, tokenizer, optim, schedule, trainer, logger, probes) are typed `Any`: their classes check their own arguments.

A new top-level key of a fork's goes here (or takes a `+` on the command line: `+my_key=1`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class Mode:
    """conf/mode/*.yaml: how a run trains and is judged."""

    name: str = "overfit"
    max_steps: int = 1000
    target_loss: float = 0.02
    reseed: bool = True
    val_every: int = 100
    ckpt_every: int = 0
    log_every: int = 1
    progress_bar: bool = False
    samples: int = 3  # mode=eval: continuations written to eval.json
    new_tokens: int = 32  # mode=eval: tokens each continuation adds
    temperature: float = 0.8  # mode=eval: the sampled continuation's (the other is greedy)


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
    optimized_metric: str | None = None  # what a sweep's job returns (harness.search)
    optim: Any = None
    schedule: Any = None
    mode: Mode = field(default_factory=Mode)
    model: Any = None
    data: Any = None
    tokenizer: Any = None
    trainer: Any = None
    logger: Any = None
    probes: Any = None
    callbacks: Any = None  # conf/callbacks/: Lightning callbacks, each a _target_ node
    debug: Any = None  # conf/debug/ (optional): fdr | limit | profiler | anomaly
    paths: Any = None  # conf/paths/: data_dir, log_dir, output_dir
    doctor: Any = None  # experiment=doctor: {ladder, substitute, timeout} (harness.doctor)


def register() -> None:
    """Put the schema where conf/train.yaml's defaults look for it. Idempotent; harness/__init__ calls it, so
    anything that composes this config (train.py, tests, benches, a launcher's job) has it."""
    ConfigStore.instance().store(name="train_schema", node=Train)
