"""The dead-gradient sentinel, `DeadGradients`: a parameter whose gradient stays zero, missing or below a
threshold for `patience` steps is reported once (`dead_params`), counted on the device. Axes: param."""

from __future__ import annotations

import torch
from torch import nn

from harness.config.groups.probes import DeadKeys
from harness.probes.layers.norms import find_guard, gradient_norms, parameter_names
from harness.probes.probe import Probe, checked_declared
from harness.report.symptoms import Symptom
from harness.train.distributed.shard_sums import any_sharded, local
from harness.train.nonfinite import NonFiniteGuard


def _dead_threshold(dtype: torch.dtype, threshold: float | None) -> float:
    """The norm at or below which a gradient counts as zero: `threshold`, else the dtype's smallest normal."""
    if threshold is not None:
        return threshold
    return max(torch.finfo(dtype).tiny, torch.finfo(torch.float32).tiny)


class DeadGradients(Probe):
    """`grad_norm/dead`, and a `dead_params` symptom per parameter whose gradient stays below `threshold`."""

    def __init__(self, every: int | None = 1, patience: int = 10, threshold: float | None = None):
        super().__init__(every)
        self.patience = checked_declared(DeadKeys, "patience", patience)
        self.threshold = checked_declared(DeadKeys, "threshold", threshold, optional=True)
        self.dead_params: list[str] = []
        self.params: list[nn.Parameter] = []
        self.guard: NonFiniteGuard | None = None
        self.pending: int | None = None  # the step whose flags are read at the end of its batch
        self.sharded = False

    def on_train_start(self, trainer, pl_module) -> None:
        self.guard = find_guard(trainer)
        named = parameter_names(pl_module)
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        if not self.params:
            return
        self.sharded = any_sharded(self.params)  # every rank takes part in the norms' reduction
        device = local(self.params[0]).device
        self.thresholds = torch.tensor(
            [_dead_threshold(p.dtype, self.threshold) for p in self.params], device=device
        )
        self.streak = torch.zeros(len(self.params), dtype=torch.int32, device=device)
        self.fired = torch.zeros(len(self.params), dtype=torch.bool, device=device)

    @torch.no_grad()
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if not self.params or not (trainer.is_global_zero or self.sharded):
            return
        grad_norms = gradient_norms(self.params, self.guard, self.sharded)[0]
        # on the device, every step: no sync
        self.streak = (self.streak + 1) * (grad_norms <= self.thresholds)
        self.fired |= self.streak >= self.patience
        if self.due(trainer.global_step) and trainer.is_global_zero:
            self.pending = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # the flags, read with the step's other values on the steps this probe logs
        if self.pending is not None:
            step, self.pending = self.pending, None
            self.sink.defer(step, {"fired": self.fired.clone()}, lambda read: self._read(step, read["fired"]))

    def _read(self, step: int, fired: list[float]) -> None:
        flags = [bool(f) for f in fired]
        dead = self._report(flags, step) if any(flags) else float(len(self.dead_params))
        self.sink.add(step, {"grad_norm/dead": dead})

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and self.params:
            self._report(self.fired.tolist(), trainer.global_step)  # a streak that ended after the last check

    def _report(self, fired: list[bool], step: int) -> float:
        """Report each newly dead parameter once as `dead_params`; how many are dead so far."""
        for name, dead in zip(self.names, fired, strict=True):
            if dead and name not in self.dead_params:
                self.dead_params.append(name)
                detail = (
                    f"dead gradient: zero, missing or below the threshold for {self.patience} steps in a row"
                )
                self.sink.report(Symptom("dead_params", step, name, 0.0, detail))
        return float(len(self.dead_params))

    def verdict_items(self) -> dict:
        return {"dead_params": list(self.dead_params)}
