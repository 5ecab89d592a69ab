"""A step's loss, `StepLoss`: every masked position weighs the same, however the step is split into
micro-batches and ranks (docs/contracts.md, Loss); a micro-batch's loss is read as its masked mean."""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.train.distributed.shard_sums import local, reduce


class StepLoss:
    """The weights of one step's micro-batches, and the step's loss (`value`, detached, the same on every
    rank)."""

    def __init__(self):
        self.reference: torch.Tensor | None = None  # the count every micro-batch's backward is divided by
        self.pending: torch.Tensor | None = None  # float64 [sum of the losses, count] of the step so far
        self.value: torch.Tensor | None = None

    def weigh(self, mean: torch.Tensor, loss_mask: torch.Tensor, ranks: int, micro: int) -> torch.Tensor:
        """What a micro-batch's backward runs on: its `mean`, weighed by its count where the step is split."""
        if ranks * micro == 1:
            self.value = mean.detach()
            return mean
        count = loss_mask.sum().double()  # ranks: data-parallel ranks; micro: micro-batches a step
        part = torch.stack([mean.detach().double() * count, count])
        if micro == 1:  # the step is this micro-batch on every rank: its total is known before the backward
            # mean x ranks x count / total; the ranks' gradient averaging divides by ranks again
            total = reduce(part)
            self.value = (total[0] / total[1]).float()  # 0/0: nan, a step without a position in the loss
            return mean * (ranks * count / total[1].clamp_min(1)).to(mean.dtype)
        self.pending = part if self.pending is None else self.pending + part
        # the sum over a reference count shared by every rank for the run: values near a mean's (fp16 loss scaling)
        if self.reference is None:  # once a run: the first micro-batch's count, the largest over the ranks
            self.reference = reduce(count.clone(), dist.ReduceOp.MAX).clamp_min(1)
        return mean * (count / self.reference).to(mean.dtype)

    def normalize(self, params, ranks: int, micro: int) -> None:
        """After a step's last backward: the counts summed over ranks, the gradients made the step mean's."""
        if self.pending is None:  # one micro-batch a step: weigh() has weighed it whole
            return
        total = reduce(self.pending)
        self.pending = None
        count = total[1].clamp_min(1)
        self.value = (total[0] / total[1]).float()  # 0/0: nan, a step without a position in the loss
        grads = [local(p.grad) for p in params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, (ranks * micro * self.reference / count).to(grads[0].dtype))
