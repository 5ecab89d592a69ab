"""What every probe is: `Probe`, a callback with a period (`every`, `due`), bound by its ProbeSet to the run
(`RunInfo`) and the metric sink; `checked_declared` checks a built-in probe's argument by its declaration
(harness.config.groups.probes)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl

from harness.config.declare import declared_fields
from harness.errors import ConfigError
from harness.ops.loss import CrossEntropy, Loss
from harness.probes.sink import MetricSink
from harness.train.distributed.shard_sums import any_sharded

log = logging.getLogger(__name__)


def due(step: int, every: int | None) -> bool:
    """Whether something done every `every` steps (None: never) is done at `step` (step 0 included)."""
    return every is not None and step % every == 0


def _checked_whole_number(name: str, value, minimum: int, hint: str, optional: bool = False):
    """`value` if a whole number >= `minimum` (or None, `optional`), else a ConfigError naming argument
    `name`."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, value, f"must be a whole number >= {minimum}{' or null' * optional}; {hint}")
    return value


def checked_declared(keys, name: str, value, optional: bool = False):
    """`value` if within the range the declaration class `keys` gives its key `name` (the door checks the same
    declaration), or None with `optional`; else a ConfigError naming argument `name`."""
    item = next(i for i in declared_fields(keys) if i.name == name)
    hint = f"{item.doc} (try {'null' if item.default is None else item.default})"
    if item.whole:
        return _checked_whole_number(name, value, int(item.low), hint, optional)
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= item.low:
        raise ConfigError(name, value, f"must be a number >= {item.low}{' or null' * optional}; {hint}")
    return value


def off_when_sharded(trainer, pl_module, what: str, why: str) -> bool:
    """Whether the model is sharded, where `what` is off: rank 0 says so once, with `why`."""
    if not any_sharded(pl_module.parameters()):
        return False
    if trainer.is_global_zero:
        log.info("%s off under sharding: %s", what, why)
    return True


@dataclass
class RunInfo:
    """What a probe may know of its run: `run_dir` (None: write nothing), `data`, `overfit`, `plots`, `loss`."""

    run_dir: Path | None = None
    data: object = None
    overfit: bool = False
    plots: bool = True
    loss: Loss = field(default_factory=CrossEntropy)

    def file(self, name: str, plot: bool = False) -> Path | None:
        """`run_dir / name`, or None where nothing is to be written (no run dir; a plot with plots off)."""
        if self.run_dir is None or (plot and not self.plots):
            return None
        return Path(self.run_dir) / name


class Probe(pl.Callback):
    """A probe: a Lightning callback working every `every` steps (None: never), touching no tensor on other
    steps, run inside a ProbeSet. It logs with `self.sink.add(step, {name: float})`, reports with
    `self.sink.report(Symptom(...))`, reads `self.run` (RunInfo), and adds to verdict.json via
    `verdict_items()`."""

    def __init__(self, every: int | None = 1):
        self.every = _checked_whole_number(
            "every", every, 1, "steps between two logs (try 10)", optional=True
        )
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
        """What this probe adds to verdict.json, merged in at the end of the run."""
        return {}
