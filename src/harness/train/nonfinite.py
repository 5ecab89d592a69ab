"""Non-finite values stop a run: `NonFiniteGuard` checks the gradients about to be applied, skips that update and
raises `NonFinite` naming the step, and the first module or parameter at fault."""

from __future__ import annotations

import math

import pytorch_lightning as pl
import torch

from harness.train.distributed.shard_sums import any_sharded
from harness.train.distributed.shard_sums import norms as whole_norms
from harness.train.perf.readout import readout_of


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
    """Checks the gradients about to be applied; on a NaN or inf, skips that update and raises NonFinite.

    With an optimizer whose fused kernels take `found_inf` (AdamW, Adam, SGD with fused=true, the default), the
    update is skipped on the device, and the flags are read with the step's other values at the next logging
    step (harness.train.perf.readout): no copy to the host in between. Any other optimizer needs the flag on the
    host before its step: one sync a step."""

    def __init__(self):
        self.batch = None
        self.named: list[tuple[str, torch.nn.Parameter]] = []
        self.sharded = False
        # the gradients this step's check read and their norms (Float[param], stacked), until the batch ends: the
        # layer probe (harness.probes.layers.norms), which runs after the guard, logs them instead of taking them again
        self.checked: tuple[list[torch.Tensor], torch.Tensor | None] = ([], None)
        self.unread: dict[
            int, tuple
        ] = {}  # step -> (its parameters' names, norms, batch) until its flag is read
        self.found: NonFinite | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.named = list(pl_module.named_parameters())  # once: walking the module tree each step is not free
        # under sharding each rank holds a slice of every gradient: the norms are the whole gradients', summed
        # across ranks (one all-reduce a step), so that every rank sees the same NaN and stops at the same step
        self.sharded = any_sharded(p for _, p in self.named)
        readout = readout_of(trainer)
        if readout is not None:
            readout.after(self._stop_if_found)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batch = batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.checked = ([], None)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        params = [(n, p) for n, p in self.named if p.grad is not None]
        if not params:
            return
        norms = whole_norms([p.grad for _, p in params], self.sharded)
        self.checked = ([p.grad for _, p in params], norms)
        inner = getattr(optimizer, "optimizer", optimizer)  # Lightning's wrapper's
        readout = readout_of(trainer)
        if readout is None or not _skips_on_device(inner):
            if not bool(torch.isfinite(norms).all()):
                self._found(trainer.global_step, [n for n, _ in params], norms, self.batch, pl_module)
                optimizer.zero_grad(set_to_none=True)
                raise self.found
            return
        bad = torch.isfinite(norms).all().logical_not()
        inner.found_inf = bad.float()  # the fused step skips its update, and its step count, where this is 1
        step = trainer.global_step
        self.unread[step] = ([n for n, _ in params], norms, self.batch)
        readout.defer(step, {"nonfinite": bad}, lambda values: self._read(step, values, pl_module))

    def _read(self, step: int, values: dict, pl_module) -> None:
        names, norms, batch = self.unread.pop(step)
        if values["nonfinite"] and self.found is None:
            self._found(step, names, norms, batch, pl_module)

    def _found(self, step: int, names: list[str], norms: torch.Tensor, batch, pl_module) -> None:
        """Name what went non-finite at `step`: the first module whose output is not finite on its batch, else
        the first parameter whose gradient is not."""
        module = first_nonfinite_module(pl_module.model, batch["input_ids"])
        grads = [n for n, norm in zip(names, norms.tolist(), strict=True) if not math.isfinite(norm)]
        where = (
            f"module {module} outputs a non-finite value" if module else f"non-finite gradient in {grads[0]}"
        )
        self.found = NonFinite(step, where)

    def _stop_if_found(self, trainer) -> None:
        """After a flush: a step read as non-finite stops the run (its update, and any later bad one, skipped)."""
        if self.found is not None:
            self.unread.clear()
            raise self.found


def _skips_on_device(optimizer) -> bool:
    """Whether `optimizer.step` skips its update where `optimizer.found_inf` is 1: torch's fused kernels do."""
    fused = any(group.get("fused") for group in getattr(optimizer, "param_groups", []))
    return fused and isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD))
