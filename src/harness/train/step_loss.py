"""The loss of an optimizer step: every position in the loss mask weighs the same, however the step is split.

A step may be one batch, several accumulated micro-batches (`+trainer.accumulate_grad_batches=K`), one share of
the batch on each of several ranks (`trainer=ddp`, `trainer=fsdp`, torchrun, SLURM), or both. Its loss is

    sum over every masked position of every micro-batch on every rank of loss(position) / their total count

so a token of a short document counts as much as a token of a long one, and accumulating or adding ranks never
changes the gradient of the same examples. Averaging each micro-batch's mean instead (what Lightning's
accumulation and data parallelism's gradient averaging do to a mean loss) gives a micro-batch of few positions the
weight of one of many: on padded documents, a step split in two moved the weights 19% of the step away from the
same step taken whole.

How, without reading the micro-batches ahead. Where a step is one micro-batch on each rank, its backward runs on
its mean times ranks x its count over the step's total count, which one all-reduce of two numbers gives before the
backward (the ranks' averaging divides by the ranks again): nothing else to do. Where a step accumulates several,
each micro-batch's backward runs on its mean times its count (its sum) over `reference`, one count shared by every
rank for the whole run (it keeps the backward's values near a mean's, for fp16's loss scaling); at the step's end,
once the ranks have averaged the gradients, one all-reduce adds up the counts (and the sums, for the step's loss),
and the gradients are multiplied by ranks x micro-batches x reference / total count, one pass over them. One
process without accumulation is left as it was: its mean is the step's.

The loss's own value is taken as the micro-batch's mean over its masked positions (`Loss.__call__`, the mean of
`per_position`); a fork's loss whose `__call__` returns something else is weighed the same way, by the count of
its micro-batch's positions."""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.train.distributed.shard_sums import local, reduce


class StepLoss:
    """The weights of one optimizer step's micro-batches, and that step's loss (`value`, detached: the mean over
    every masked position of the step, on every rank alike)."""

    def __init__(self):
        self.reference: torch.Tensor | None = None  # the count every micro-batch's backward is divided by
        self.pending: torch.Tensor | None = None  # float64 [sum of the losses, count] of the step so far
        self.value: torch.Tensor | None = None

    def weigh(self, mean: torch.Tensor, loss_mask: torch.Tensor, ranks: int, micro: int) -> torch.Tensor:
        """What the backward of a micro-batch runs on: its `mean` loss as it is where the step is one batch on
        one process, else its sum over `reference` (`ranks`: the data-parallel ranks, `micro`: the micro-batches
        a step accumulates)."""
        if ranks * micro == 1:
            self.value = mean.detach()
            return mean
        count = loss_mask.sum().double()
        part = torch.stack([mean.detach().double() * count, count])
        if micro == 1:  # the step is this micro-batch on every rank: its total is known before the backward
            total = reduce(part)
            self.value = (total[0] / total[1]).float()  # 0/0: nan, a step without a position in the loss
            return mean * (ranks * count / total[1].clamp_min(1)).to(mean.dtype)
        self.pending = part if self.pending is None else self.pending + part
        if self.reference is None:  # once a run: the first micro-batch's count, the largest over the ranks
            self.reference = reduce(count.clone(), dist.ReduceOp.MAX).clamp_min(1)
        return mean * (count / self.reference).to(mean.dtype)

    def normalize(self, params, ranks: int, micro: int) -> None:
        """At the end of a step's backward, before anything reads the gradients: the step's counts summed over
        the ranks (one all-reduce), and the gradients of `params` made those of the mean over them."""
        if self.pending is None:  # one micro-batch a step: weigh() has weighed it whole
            return
        total = reduce(self.pending)
        self.pending = None
        count = total[1].clamp_min(1)
        self.value = (total[0] / total[1]).float()  # 0/0: nan, a step without a position in the loss
        grads = [local(p.grad) for p in params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, (ranks * micro * self.reference / count).to(grads[0].dtype))
