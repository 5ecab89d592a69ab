"""Non-finite values stop a run at their step: `NonFiniteGuard` checks the gradients about to be applied,
skips that update and raises `NonFinite` naming the first module or parameter at fault."""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from harness.train.distributed.shard_sums import any_sharded
from harness.train.distributed.shard_sums import norms as whole_norms


class NonFinite(Exception):
    """A NaN or inf reached the loss or a gradient; `where` names the first module or parameter."""

    def __init__(self, step: int, where: str):
        self.step, self.where = step, where
        super().__init__(f"non-finite value at step {step}: {where}")


def first_nonfinite_module(model: torch.nn.Module, input_ids: torch.Tensor) -> str | None:
    """The first module whose output is not finite, found by re-running the forward pass with hooks."""
    found: list[str] = []

    def watch(name):
        def hook(module, inputs, output):
            outputs = output if isinstance(output, tuple) else (output,)
            if not found and any(
                isinstance(o, torch.Tensor) and o.is_floating_point() and not torch.isfinite(o).all()
                for o in outputs
            ):
                found.append(name or type(module).__name__)

        return hook

    handles = [m.register_forward_hook(watch(name)) for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None


class NonFiniteGuard(pl.Callback):
    """Checks the gradients about to be applied (one sync a step); on a NaN or inf, skips the update, raises
    NonFinite."""

    def __init__(self):
        self.batch = None
        self.named: list[tuple[str, torch.nn.Parameter]] = []
        self.sharded = False
        # the gradients this step's check read and their norms (Float[param], stacked), until the batch ends: the
        # layer probe (harness.probes.layers.norms), which runs after the guard, logs them instead of taking them again
        self.checked: tuple[list[torch.Tensor], torch.Tensor | None] = ([], None)

    def on_train_start(self, trainer, pl_module) -> None:
        self.named = list(pl_module.named_parameters())  # once: walking the module tree each step is not free
        # under sharding each rank holds a slice of every gradient: the norms are the whole gradients', summed
        # across ranks (one all-reduce a step), so that every rank sees the same NaN and stops at the same step
        self.sharded = any_sharded(p for _, p in self.named)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batch = batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.checked = ([], None)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        params = [(n, p) for n, p in self.named if p.grad is not None]
        if not params:
            return
        grads = [p.grad for _, p in params]
        norms = whole_norms(grads, self.sharded)
        self.checked = (grads, norms)
        if bool(torch.isfinite(norms).all()):
            return
        module = first_nonfinite_module(pl_module.model, self.batch["input_ids"])
        grads = [n for (n, _), norm in zip(params, norms, strict=True) if not torch.isfinite(norm)]
        where = (
            f"module {module} outputs a non-finite value" if module else f"non-finite gradient in {grads[0]}"
        )
        optimizer.zero_grad(set_to_none=True)
        raise NonFinite(trainer.global_step, where)
