"""What every probe is: `Probe`, a Lightning callback with a period (`every`, `due(step)`), the run it is in
(`RunInfo`) and the shared metric sink (sink.py), both handed over by the one ProbeSet callback it runs in
(probeset.py). A built-in probe and a fork's own are the same kind of thing, configured the same way (a
`_target_` entry of conf/probes/default.yaml, built by build.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl

from harness.errors import ConfigError
from harness.ops.loss import CrossEntropy, Loss
from harness.probes.sink import MetricSink
from harness.train.distributed.shard_sums import sharded

log = logging.getLogger(__name__)


def due(step: int, every: int | None) -> bool:
    """Whether something done every `every` steps (None: never) is done at `step` (step 0 included)."""
    return every is not None and step % every == 0


def whole(name: str, value, minimum: int, hint: str, optional: bool = False):
    """`value` of the argument `name` if it is a whole number >= `minimum` (or None when `optional`), else a
    ConfigError naming the argument (the builder prefixes the probe's config key)."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, value, f"must be a whole number >= {minimum}{' or null' * optional}; {hint}")
    return value


def off_when_sharded(trainer, pl_module, what: str, why: str) -> bool:
    """Whether the model is sharded (trainer=fsdp), where `what` cannot be had cheaply: then it is off, and rank 0
    says so once, with `why`, rather than logging a figure of one rank's slice."""
    if not sharded(pl_module.parameters()):
        return False
    if trainer.is_global_zero:
        log.info("%s off under sharding: %s", what, why)
    return True


@dataclass
class RunInfo:
    """What a probe may know of the run it watches. `run_dir`: where its files go (None: write none);
    `data`: the set-up datamodule (tokenizer, train_dataset, val_dataset); `overfit`: mode=overfit (a
    handful of examples, re-seeded every step); `plots`: draw the PNGs into `run_dir` at the end; `loss`: the run's
    loss (harness.ops.loss), what every probe measures a loss with."""

    run_dir: Path | None = None
    data: object = None
    overfit: bool = False
    plots: bool = True
    loss: Loss = field(default_factory=CrossEntropy)

    def file(self, name: str, plot: bool = False) -> Path | None:
        """`run_dir / name`, or None where nothing is to be written there (no run dir; a plot with plots off)."""
        if self.run_dir is None or (plot and not self.plots):
            return None
        return Path(self.run_dir) / name


class Probe(pl.Callback):
    """A probe: a Lightning callback that works every `every` steps (None: never), and on no other step
    touches a tensor (no host sync). It defines the Lightning hooks it needs; the ProbeSet it runs in calls
    each of them, in the order of the config, as one callback (see probeset.py), then hands the step's
    scalars to the loggers as one row. Inside a ProbeSet (train.py builds one; a Trainer of your own takes
    `ProbeSet([probe, ...])`):

        self.sink.add(step, {"name": float})   # the step's scalars, plain floats: one row, every logger
        self.run                               # RunInfo: run_dir, data, overfit, plots

    `pl_module.log` works as well, from any hook. What belongs in verdict.json comes from `verdict_items()`."""

    def __init__(self, every: int | None = 1):
        self.every = whole("every", every, 1, "steps between two logs (try 10)", optional=True)
        self.run = RunInfo()
        self._sink: MetricSink | None = None

    def bind(self, sink: MetricSink, run: RunInfo) -> None:
        """Called by the ProbeSet this probe runs in: the sink it logs to, the run it watches."""
        self._sink, self.run = sink, run

    @property
    def sink(self) -> MetricSink:
        if self._sink is None:
            raise RuntimeError(
                f"{type(self).__name__} logs through a ProbeSet's sink but runs outside one: pass "
                f"ProbeSet([probe]) to the Trainer, not the probe itself"
            )
        return self._sink

    def due(self, step: int) -> bool:
        """Whether this probe works at `step`: every `every` steps, step 0 included."""
        return due(step, self.every)

    def verdict_items(self) -> dict:
        """What this probe adds to verdict.json (merged into it by harness.tasks.training at the end of the run)."""
        return {}
