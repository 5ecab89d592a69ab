"""The optimizer's `parameter_groups` and the learning-rate `schedule`: `optim` and `schedule` configs are
`_partial_`s, called with the groups and as schedule(optimizer, total_steps=...)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from harness.config.groups.optim import check_schedule
from harness.train.distributed.shard_sums import any_sharded

log = logging.getLogger(__name__)


def embedding_weights(model: nn.Module) -> set[int]:
    """The ids of the embeddings' weights: tensors read row by row, not as matrices."""
    return {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}


def parameter_groups(model: nn.Module) -> list[dict]:
    """Matrices and convolutions decayed; norms, biases and embeddings never (a tied tensor counts once)."""
    embedded = embedding_weights(model)
    decay, keep = [], []
    for _, p in model.named_parameters():  # named_parameters yields a tied tensor once
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 and id(p) not in embedded else keep).append(p)
    return [{"params": decay}, {"params": keep, "weight_decay": 0.0}]


def optimizer_and_schedule(
    optimizer: Callable, schedule: Callable | None, model: nn.Module, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
    """The `optim` config's optimizer over `model`'s groups, and the `schedule` config's scheduler (or None). A value
    the optimizer or the schedule refuses as it is made is a ConfigError naming its key."""
    made = _made("optim", optimizer, parameter_groups(model))
    unfused_where_sharded(made)
    return made, None if schedule is None else _made("schedule", schedule, made, total_steps=total_steps)


def _made(key: str, make: Callable, *args, **kwargs):
    """`make(*args, **kwargs)`, a partial of the config node at `key`; its library's refusal a one-line error."""
    try:
        return make(*args, **kwargs)
    except (ValueError, TypeError) as err:
        from harness.errors import ConfigError

        if isinstance(err, ConfigError) or not isinstance(
            make, partial
        ):  # a ConfigError names its key already
            raise
        from omegaconf import OmegaConf

        from harness.config.build import refused

        node = OmegaConf.create(
            {"_target_": f"{make.func.__module__}.{make.func.__qualname__}", **make.keywords}
        )
        raise refused(err, key, node) from None


def unfused_where_sharded(optimizer: torch.optim.Optimizer) -> None:
    """Fused kernels under sharding (trainer=fsdp) run unfused where they cannot: SGD's has no rule for sharded
    (DTensor) parameters, and none takes sharded and plain ones at once (one made after the model was sharded:
    checked again as training starts). Unfused, the non-finite guard reads its flag on the host each step."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    sharded = [any_sharded([p]) for p in params]
    fused = any(group.get("fused") for group in optimizer.param_groups)
    if fused and any(sharded) and (isinstance(optimizer, torch.optim.SGD) or not all(sharded)):
        for group in optimizer.param_groups:
            group["fused"] = False
        log.info(
            "optim: %s's fused step cannot take these sharded parameters: unfused", type(optimizer).__name__
        )


def adamw(lr: float = 3e-3, **kwargs) -> Callable:
    """The optimizer a LightningModule gets without an `optim` config (benches, tests)."""
    return partial(torch.optim.AdamW, lr=lr, betas=(0.9, 0.99), weight_decay=0.0, **{"fused": True, **kwargs})


def multiplier(step: int, shape: str, warmup_steps: int, total_steps: int, floor: float) -> float:
    """The learning rate at `step` as a fraction of its peak: warmup, then `shape` down to `floor`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if shape == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    decayed = 0.5 * (1 + math.cos(math.pi * progress)) if shape == "cosine" else 1 - progress
    return floor + (1 - floor) * decayed


def schedule(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    shape: str = "constant",
    warmup_steps: int = 0,
    min_lr: float | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR over `multiplier`; `min_lr` (absolute) ends cosine and linear, None: a tenth of the peak."""
    peak = optimizer.param_groups[0]["lr"]
    check_schedule(shape, warmup_steps, min_lr, peak)
    floor = 0.1 if min_lr is None else (min_lr / peak if peak else 0.0)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        partial(multiplier, shape=shape, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor),
    )
