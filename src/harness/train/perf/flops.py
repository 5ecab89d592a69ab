"""A training batch's FLOPs, counted once (`batch_flops`): torch's FlopCounterMode around a forward and backward of
the plain model (not a compiled one) and its loss, in eval mode; the run trains as it would have without it."""

from __future__ import annotations

import contextlib

import torch
from torch.utils.flop_counter import FlopCounterMode

from harness.seeding import rng_state, set_rng_state
from harness.train.distributed.shard_sums import any_sharded


def batch_flops(model: torch.nn.Module, loss, batch: dict, context=None) -> int:
    """FLOPs of a forward and backward of `model` and `loss(logits, targets, loss_mask)` on `batch`, counted by
    torch (matrix products, convolutions, attention); `context`: the precision's forward context (autocast).
    No gradient is kept: the backward's are taken with torch.autograd.grad, never written to `.grad`."""
    params = [p for p in model.parameters() if p.requires_grad]
    # a sharded model (FSDP2): its backward would reduce-scatter across ranks; its forward alone, times 3
    sharded = any_sharded(params)
    generators = rng_state()
    # eval mode: no running statistics (BatchNorm) moved, no dropout drawn, no activation recomputed: a model's
    # FLOPs as MFU counts them; each module's own mode put back after
    modes = {module: module.training for module in model.modules()}
    model.eval()
    counter = FlopCounterMode(display=False)
    try:
        with counter:  # entering it again would clear its counts: the forward and the backward in one
            with (
                torch.no_grad() if sharded else contextlib.nullcontext(),
                context or contextlib.nullcontext(),
            ):
                logits = model(batch["input_ids"])
                value = loss(logits, batch["targets"], batch["loss_mask"])
            if not sharded and params and value.requires_grad:
                torch.autograd.grad(value, params, allow_unused=True)
    finally:
        set_rng_state(generators)
        for module, training in modes.items():
            module.training = training
    total = counter.get_total_flops()
    return 3 * total if sharded else total  # a backward takes about twice its forward's products
