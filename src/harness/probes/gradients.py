"""Per-parameter gradient norm (+ the total), weight norm, update ratio ‖Δw‖/‖w‖, and the dead-gradient sentinel.

Gradients are read in `on_before_optimizer_step`: after accumulation and AMP unscaling, exactly what the
optimizer is about to use. The gradient and weight norms of every parameter come from one
`torch._foreach_norm` call (the gradients' are the non-finite guard's, which has just taken them, when the
harness runs one), and the step's numbers reach the host in one transfer, on logging steps only.
The sentinel's streak counters live on the device and are updated every step without a sync. (A norm is
taken in the gradient's dtype: entries below ~1e-19 in float32 square to subnormals, flushed to zero under
flush_denormal, so such a gradient counts as zero; it could not move a weight either.)

Axes: param (one entry per parameter tensor, in `named_parameters()` order)."""

from __future__ import annotations

import logging
import math

import pytorch_lightning as pl
import torch
from einops import rearrange
from torch import nn

from harness.faults import NonFiniteGuard
from harness.probes.emit import MetricSink, due

log = logging.getLogger(__name__)


def parameter_names(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) for every parameter, frozen ones included, without the LightningModule's "model."."""
    named = list(module.named_parameters())
    prefix = "model." if named and all(name.startswith("model.") for name, _ in named) else ""
    return [(name[len(prefix) :], p) for name, p in named]


def dead_threshold(dtype: torch.dtype, threshold: float | None) -> float:
    """A gradient norm at or below this counts as zero: `threshold`, or else the smallest normal number of
    the dtype (a norm below it is zero or subnormal: no usable signal), at least float32's (the counters' dtype)."""
    if threshold is not None:
        return threshold
    return max(torch.finfo(dtype).tiny, torch.finfo(torch.float32).tiny)


class LayerNorms(pl.Callback):
    """Every `every` steps (None: never): `grad_norm/<param>`, `grad_norm/total`, `grad_norm/missing` (how many
    parameters have no gradient; their norm shows as 0) and `weight_norm/<param>`, both read where the optimizer
    reads them (before its update). On logging steps that are multiples of `ratio_every`:
    `update_ratio/<param>` = ‖Δw‖/‖w‖ of that step's update (it needs a copy of the weights, hence its own
    period). The sentinel: every parameter whose gradient was zero, missing or below the dtype-aware
    threshold for `patience` steps in a row (None: off) is reported by name, once."""

    def __init__(
        self,
        sink: MetricSink,
        every: int | None,
        patience: int | None,
        threshold: float | None = None,
        ratio_every: int | None = None,
    ):
        self.sink, self.every, self.patience, self.threshold = sink, every, patience, threshold
        self.ratio_every = ratio_every if every is not None else None
        self.dead_params: list[str] = []
        self.pending: tuple | None = None
        self.params: list[nn.Parameter] = []
        # the harness's non-finite guard, when it runs one: its gradient norms are reused
        self.guard: NonFiniteGuard | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.guard = next((cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard)), None)
        named = parameter_names(pl_module)
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        self.grad_keys = [f"grad_norm/{name}" for name in self.names]
        self.weight_keys = [f"weight_norm/{name}" for name in self.names]
        self.ratio_keys = [f"update_ratio/{name}" for name in self.names]
        if not self.params:
            return
        device = self.params[0].device
        self.zero = torch.zeros((), device=device)  # stands in for a missing gradient's norm
        self.thresholds = torch.tensor(
            [dead_threshold(p.dtype, self.threshold) for p in self.params], device=device
        )
        self.streak = torch.zeros(len(self.params), dtype=torch.int32, device=device)
        self.fired = torch.zeros(len(self.params), dtype=torch.bool, device=device)
        # the weights before an update-ratio step's update, refilled in place on those steps only
        self.before = [torch.empty_like(p).detach() for p in self.params] if self.ratio_every else []

    @torch.no_grad()
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if not self.params or not trainer.is_global_zero:
            return
        step = trainer.global_step
        grads = [p.grad for p in self.params]
        present = [g for g in grads if g is not None]
        logging_now = due(step, self.every)
        checked, checked_norms = self.guard.checked if self.guard is not None else ([], [])
        if len(checked) == len(present) and all(a is b for a, b in zip(checked, present, strict=True)):
            # the guard's norms of these very gradients, this step; the weights' on logging steps
            norms = [*checked_norms, *(torch._foreach_norm(self.params) if logging_now else [])]
        else:  # gradient norms (and, on logging steps, weight norms) of every parameter in one foreach call
            norms = list(torch._foreach_norm(present + self.params if logging_now else present))
        if len(present) < len(grads):  # a missing gradient: norm 0, counted, and watched by the sentinel
            found = iter(norms[: len(present)])
            norms[: len(present)] = [self.zero if g is None else next(found) for g in grads]
        norms = rearrange(norms, "param -> param").float()
        grad_norms = norms[: len(grads)]
        if self.patience is not None:  # on the device, every step: no sync
            self.streak = (self.streak + 1) * (grad_norms <= self.thresholds)
            self.fired |= self.streak >= self.patience
        if logging_now:
            ratio_now = due(step, self.ratio_every)
            if ratio_now:
                torch._foreach_copy_(self.before, self.params)
            self.pending = (step, norms, len(grads) - len(present), ratio_now)
        elif self.patience is not None and self.every is None and (step + 1) % self.patience == 0:
            # no norms logged: check here
            self.sink.add(step, {"grad_norm/dead": self._report(self.fired.tolist())})

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.pending is None:
            return
        step, norms, missing, ratio_now = self.pending
        self.pending = None
        parts = [norms, self.fired.float()] if self.patience is not None else [norms]
        if ratio_now:
            torch._foreach_sub_(self.before, self.params)  # before - after = -Δw, in place: no allocation
            parts.append(rearrange(list(torch._foreach_norm(self.before)), "param -> param").float())
        packed = torch.cat(parts).tolist()  # the step's one transfer
        count = len(self.params)
        grad, weight = packed[:count], packed[count : 2 * count]
        metrics = dict(zip(self.grad_keys, grad, strict=True))
        metrics.update(zip(self.weight_keys, weight, strict=True))
        metrics["grad_norm/total"] = math.sqrt(math.fsum(g * g for g in grad))
        metrics["grad_norm/missing"] = float(missing)
        if self.patience is not None:
            flags = packed[2 * count : 3 * count]
            metrics["grad_norm/dead"] = self._report(flags) if any(flags) else float(len(self.dead_params))
        if ratio_now:
            # ‖Δw‖/‖w‖ is undefined for an all-zero tensor (a zero-initialized bias before its first update): nan
            update = packed[-count:]
            metrics.update(
                zip(
                    self.ratio_keys,
                    [u / w if w else math.nan for u, w in zip(update, weight, strict=True)],
                    strict=True,
                )
            )
        self.sink.add(step, metrics)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and self.patience is not None and self.params:
            self._report(self.fired.tolist())  # a streak that ended after the last check

    def _report(self, fired: list[bool]) -> float:
        """Warn once about each newly dead parameter; returns how many are dead so far."""
        for name, dead in zip(self.names, fired, strict=True):
            if dead and name not in self.dead_params:
                self.dead_params.append(name)
                log.warning(
                    "dead gradient: %s had a zero, missing or below-threshold gradient for %d steps in a "
                    "row (unused in forward, frozen, or cut off from the loss)",
                    name,
                    self.patience,
                )
        return float(len(self.dead_params))

    def verdict_items(self) -> dict:
        return {"dead_params": list(self.dead_params)} if self.patience is not None else {}
