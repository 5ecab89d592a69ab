"""Whole tensors from shards: what the guard and the probes read of a parameter under sharding (trainer=fsdp).

Under FSDP2 each parameter (and its gradient) is a DTensor of which this rank holds one slice of the first
dimension (`to_local()`, empty where the tensor has fewer rows than there are ranks). A norm of the slice is not
the layer's norm, so every figure is computed as sums over the local slices (sums of squares, counts, extremes),
packed into one tensor and reduced across ranks in one collective, then finished (a square root, a mean).
Without sharding every function here is the plain computation, and touches no process group."""

from __future__ import annotations

import torch
import torch.distributed as dist
from einops import rearrange
from torch import nn


def is_shard(tensor) -> bool:
    """Whether `tensor` is a DTensor (a parameter or gradient under FSDP2). A plain tensor or parameter is told
    by its type alone: the probes ask for every parameter each step, and the import costs microseconds a call."""
    if type(tensor) in (torch.Tensor, nn.Parameter):
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def sharded(params) -> bool:
    """Whether any of `params` is sharded: then every rank must take part in each reduction below."""
    return any(is_shard(p) for p in params)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's slice of `tensor` (the tensor itself when it is not sharded); shares its storage."""
    return tensor.to_local() if is_shard(tensor) else tensor


def reduce(tensor: torch.Tensor, op=None) -> torch.Tensor:
    """All-reduce `tensor` in place across every rank (a sum unless `op`), or leave it when alone."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM)
    return tensor


def gathered(rows: torch.Tensor) -> torch.Tensor:
    """[rank, ...]: `rows` of every rank, stacked (one all-gather); [1, ...] when alone."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return rows[None]
    parts = [torch.empty_like(rows) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, rows.contiguous())
    return rearrange(parts, "rank ... -> rank ...")


def norms(tensors: list[torch.Tensor], shards: bool) -> list[torch.Tensor]:
    """The 2-norm of each whole tensor, 0-dim tensors in the tensors' dtype: one torch._foreach_norm; under
    sharding (`shards`) the squares of the local slices' norms summed across ranks in one all-reduce (in
    float64: a sum of two squares rounds the same as one norm)."""
    if not tensors:
        return []
    if not shards:
        return list(torch._foreach_norm(tensors))
    slices = rearrange(list(torch._foreach_norm([local(t) for t in tensors])), "param -> param")
    whole = reduce(slices.double().square()).sqrt()
    return [value.to(t.dtype) for value, t in zip(whole.unbind(), tensors, strict=True)]


def names_of(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of `module`, the names as the model itself gives them: FSDP2 and the composable
    activation checkpointing keep them; a wrapper's infix (`_fsdp_wrapped_module.`, `_checkpoint_wrapped_module.`,
    `_orig_mod.`, from FSDP1, wrapper-style checkpointing and torch.compile) is taken out."""
    infixes = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
    named = []
    for name, p in module.named_parameters():
        for infix in infixes:
            name = name.replace(infix, "")
        named.append((name, p))
    return named
