"""`ParameterNorms`: grad_norm/ (the guard's norms, `gradient_norms`), weight_norm/ and update_ratio/ ‖Δw‖/‖w‖
where the optimizer reads them, one transfer a logging step; whole layers under sharding."""

from __future__ import annotations

import math

import pytorch_lightning as pl
import torch
from torch import nn

from harness.config.groups.probes import NormsKeys
from harness.probes.probe import Probe, checked_declared, due
from harness.train.distributed.shard_sums import (
    any_sharded,
    local,
    reduce,
    square_sums,
    unwrapped_named_parameters,
)
from harness.train.distributed.shard_sums import norms as whole_norms
from harness.train.nonfinite import NonFiniteGuard


def parameter_names(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) for every parameter, frozen ones too, without the LightningModule's "model."."""
    named = unwrapped_named_parameters(
        module
    )  # a wrapper's infix (FSDP1's `_fsdp_wrapped_module.`) taken out
    prefix = "model." if named and all(name.startswith("model.") for name, _ in named) else ""
    return [(name[len(prefix) :], p) for name, p in named]


def find_guard(trainer: pl.Trainer) -> NonFiniteGuard | None:
    """The harness's non-finite guard among the trainer's callbacks, if it runs one: its norms are reused."""
    return next((cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard)), None)


def gradient_norms(
    params: list[nn.Parameter], guard: NonFiniteGuard | None, shards: bool = False
) -> tuple[torch.Tensor, int]:
    """(Float[param] gradient norms, 0 where missing; how many are missing): the guard's where it took them."""
    # squares summed in float32: entries below ~1e-19 flush to zero under flush_denormal (they move no weight)
    grads = [p.grad for p in params]
    present = [g for g in grads if g is not None]
    checked, checked_norms = guard.checked if guard is not None else ([], None)
    if len(checked) == len(present) and all(a is b for a, b in zip(checked, present, strict=True)):
        norms = checked_norms
    else:
        norms = whole_norms(present, shards) if present else None
    norms = None if norms is None else norms.float()
    if len(present) < len(grads):  # a missing gradient: norm 0, counted
        full = torch.zeros(len(grads), device=local(params[0]).device)
        if norms is not None:
            full[[i for i, g in enumerate(grads) if g is not None]] = norms
        norms = full
    return norms, len(grads) - len(present)


class ParameterNorms(Probe):
    """`grad_norm/` every `every` steps, before the update; `weight_norm/` every `weight_every`,
    `update_ratio/` (‖Δw‖/‖w‖) every `ratio_every`."""

    def __init__(self, every: int | None = 1, ratio_every: int | None = 20, weight_every: int | None = 20):
        super().__init__(every)
        self.ratio_every = checked_declared(NormsKeys, "ratio_every", ratio_every, optional=True)
        self.weight_every = checked_declared(NormsKeys, "weight_every", weight_every, optional=True)
        self.pending: tuple | None = None
        self.params: list[nn.Parameter] = []
        self.guard: NonFiniteGuard | None = None
        self.sharded = False

    def on_train_start(self, trainer, pl_module) -> None:
        self.guard = find_guard(trainer)
        named = parameter_names(pl_module)
        self.params = [p for _, p in named]
        self.sharded = any_sharded(self.params)  # then every rank computes, rank 0 logs
        self.grad_keys = [f"grad_norm/{name}" for name, _ in named]
        self.weight_keys = [f"weight_norm/{name}" for name, _ in named]
        self.ratio_keys = [f"update_ratio/{name}" for name, _ in named]
        # the weights before an update-ratio step's update, refilled in place on those steps only
        self.before = [torch.empty_like(local(p)).detach() for p in self.params] if self.ratio_every else []

    @torch.no_grad()
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = trainer.global_step
        if not self.params or not (trainer.is_global_zero or self.sharded) or not self.due(step):
            return  # nothing logged: nothing computed, no sync
        grad_norms, missing = gradient_norms(self.params, self.guard, self.sharded)
        ratio_now = due(step, self.ratio_every)
        weights = None
        if ratio_now or due(step, self.weight_every):
            slices = [local(p) for p in self.params]
            weights = square_sums(slices)  # this rank's slices', squared
            if ratio_now:
                torch._foreach_copy_(self.before, slices)
        self.pending = (step, grad_norms, weights, missing, ratio_now)

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.pending is None:
            return
        step, grads, weights, missing, ratio_now = self.pending
        self.pending = None
        parts = [] if weights is None else [weights]
        if ratio_now:
            slices = [local(p) for p in self.params]
            torch._foreach_sub_(self.before, slices)  # before - after = -Δw, in place: no allocation
            parts.append(square_sums(self.before))
        if parts and self.sharded:  # the slices' squares summed across ranks: one all-reduce
            parts = [reduce(torch.cat(parts))]
        if not trainer.is_global_zero:
            return
        norms = [part.sqrt().float() for part in parts]
        packed = torch.cat([grads, *norms])  # read with the step's other values: one transfer
        self.sink.defer(
            step, {"norms": packed}, lambda read: self._read(step, read["norms"], missing, weights, ratio_now)
        )

    def _read(self, step: int, packed: list[float], missing: int, weights, ratio_now: bool) -> None:
        count = len(self.params)
        grad, weight = packed[:count], packed[count : 2 * count]
        metrics = dict(zip(self.grad_keys, grad, strict=True))
        metrics["grad_norm/total"] = math.sqrt(math.fsum(g * g for g in grad))
        metrics["grad_norm/missing"] = float(missing)
        if weights is not None:
            metrics.update(zip(self.weight_keys, weight, strict=True))
        if ratio_now:
            # ‖Δw‖/‖w‖ is undefined for an all-zero tensor (a zero-initialized bias before its first update): nan
            update = packed[2 * count :]
            ratios = [u / w if w else math.nan for u, w in zip(update, weight, strict=True)]
            metrics.update(zip(self.ratio_keys, ratios, strict=True))
        self.sink.add(step, metrics)
